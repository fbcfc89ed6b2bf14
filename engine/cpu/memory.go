package cpu

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/memplan"
)

var _ memplan.Planner = (*Backend)(nil)

// MemoryRules implements memplan.Planner.
func (b *Backend) MemoryRules() memplan.Rules { return MemoryRules(b.threads) }

// FreeMemory implements memplan.Planner: the host's MemAvailable and
// MemTotal from /proc/meminfo. Cheap (one small read) and the kernel's own
// estimate of what can be allocated without swapping; it is the host's,
// not a cgroup limit's, so a container can still be stopped by its limit
// (the check then refuses too little, never too much). Elsewhere than
// Linux it is an error and the plan is not checked.
func (b *Backend) FreeMemory() (free, total uint64, err error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, fmt.Errorf("cpu: available memory: %w", err)
	}
	defer f.Close()
	return parseMeminfo(f)
}

// parseMeminfo reads MemAvailable and MemTotal (kB) from a /proc/meminfo.
func parseMeminfo(r io.Reader) (avail, total uint64, err error) {
	var haveA, haveT bool
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "MemAvailable" && k != "MemTotal") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("cpu: /proc/meminfo: %s: %q is not a count of kB", k, strings.TrimSpace(v))
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("cpu: /proc/meminfo: %s: %w", k, err)
		}
		if k == "MemAvailable" {
			avail, haveA = n<<10, true
		} else {
			total, haveT = n<<10, true
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("cpu: /proc/meminfo: %w", err)
	}
	if !haveA || !haveT {
		return 0, 0, errors.New("cpu: /proc/meminfo has no MemAvailable or MemTotal (kernel before 3.14?)")
	}
	return avail, total, nil
}

// MemoryRules are the CPU backend's memplan.Rules for threads threads:
//   - weights: views of the file mapping (RegisterWeight copies nothing),
//     so mapped, held against no free memory; a 1-D tensor also gets an
//     f32 copy (derived);
//   - KV: kv.New's K and V rows, and per cell AllocKV's two f32 rows (kf,
//     vf) and one f32 score per thread;
//   - scratch beyond the graph's buffers, a bound over the model's widest
//     matmul input (maxK) for a prefill of nt tokens: the quantized
//     activations of up to three weights of one input (Q8_K, 292 bytes a
//     256 values, the widest activation format), the packed lanes of the
//     multi-token dot (8 bytes a value per group of 3 tokens, up to three
//     weights), the per-thread level rows (mmRowTile x maxK bytes) and the
//     fused FFN's up buffer (nt x n_ff f32).
func MemoryRules(threads int) memplan.Rules {
	threads = max(threads, 1)
	return memplan.Rules{
		Backend: "cpu",
		Weight: func(t memplan.Tensor) (own, derived uint64) {
			if !t.Matrix() && len(t.Dims) == 1 {
				derived = 4 * uint64(t.Dims[0])
			}
			return t.Bytes(), derived
		},
		KVCellExtra: func(rowLen int, _ kv.Format) uint64 { return 8*uint64(rowLen) + 4*uint64(threads) },
		Scratch: func(p graph.Params, ts []memplan.Tensor, nt int) uint64 {
			maxK := 0
			for _, t := range ts {
				if t.Matrix() {
					maxK = max(maxK, t.Dims[0])
				}
			}
			n, k := uint64(max(nt, 1)), uint64(maxK)
			act := 3 * n * ((k*292 + 255) / 256)
			packed := 3 * ((n + 2) / 3) * k * 8
			lev := uint64(threads) * mmRowTile * k
			up := n * uint64(p.NFF) * 4
			return act + packed + lev + up
		},
		MappedWeights: true,
	}
}
