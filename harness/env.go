package harness

import (
	"bufio"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/minfer-go/minfer/internal/filehash"
	"github.com/minfer-go/minfer/schema"
)

// SMIQuery is the per-round clock query of DEVICE.md.
const SMIQuery = "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks_event_reasons.active,temperature.gpu,power.draw,uuid"

// Clocks is one nvidia-smi reading of one GPU.
type Clocks struct {
	Name         string  `json:"name"`
	Driver       string  `json:"driver"`
	SMMHz        float64 `json:"sm_mhz"`
	MemMHz       float64 `json:"mem_mhz"`
	MaxSMMHz     float64 `json:"max_sm_mhz"`
	EventReasons string  `json:"event_reasons"`
	TempC        float64 `json:"temp_c"`
	PowerW       float64 `json:"power_w"`
	// UUID names the GPU itself, so two shards on a two-GPU machine say
	// which one each ran on ("" from a reading without it).
	UUID string `json:"uuid,omitempty"`
}

func (c Clocks) String() string {
	return fmt.Sprintf("SM %.0f/%.0f MHz, mem %.0f MHz, %.0f C, %.0f W, reasons %s", c.SMMHz, c.MaxSMMHz, c.MemMHz, c.TempC, c.PowerW, c.EventReasons)
}

// ParseSMI parses `nvidia-smi --query-gpu=SMIQuery --format=csv` output (a
// header line, then one line per GPU; units such as "MHz" are stripped,
// "[N/A]" reads as 0).
func ParseSMI(out string) ([]Clocks, error) {
	var cs []Clocks
	sc := bufio.NewScanner(strings.NewReader(out))
	first := true
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if first && strings.HasPrefix(line, "name") {
			first = false
			continue
		}
		first = false
		f := strings.Split(line, ",")
		if len(f) != 8 && len(f) != 9 { // 8: a reading from before the uuid column
			return nil, fmt.Errorf("nvidia-smi: %d fields in %q, want 9", len(f), line)
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		c := Clocks{Name: f[0], Driver: f[1], SMMHz: unitNum(f[2]), MemMHz: unitNum(f[3]), MaxSMMHz: unitNum(f[4]),
			EventReasons: f[5], TempC: unitNum(f[6]), PowerW: unitNum(f[7])}
		if len(f) == 9 {
			c.UUID = f[8]
		}
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("nvidia-smi: no GPU rows")
	}
	return cs, nil
}

func unitNum(s string) float64 {
	fs := strings.Fields(s)
	if len(fs) == 0 {
		return 0
	}
	v, err := strconv.ParseFloat(fs[0], 64)
	if err != nil {
		return 0
	}
	return v
}

// ProcessStart is when the process that links the harness started (package
// initialization): `abtest run` counts its overhead from here.
var ProcessStart = time.Now()

// Probe answers questions about the machine; its lookups are fields so tests
// can replace them.
type Probe struct {
	LookPath func(string) (string, error)
	Command  func(ctx context.Context, name string, args ...string) (string, error)
}

// DefaultProbe runs real commands.
func DefaultProbe() Probe {
	return Probe{LookPath: exec.LookPath, Command: func(ctx context.Context, name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).Output()
		return string(out), err
	}}
}

// HasGPU reports whether nvidia-smi is present and answers.
func (p Probe) HasGPU(ctx context.Context) (bool, string) {
	if _, err := p.LookPath("nvidia-smi"); err != nil {
		return false, "nvidia-smi not found in PATH: no NVIDIA device on this machine"
	}
	if _, err := p.ReadClocks(ctx); err != nil {
		return false, "nvidia-smi present but did not answer: " + err.Error()
	}
	return true, ""
}

// ReadClocks reads the clocks of the GPU minfer runs on: the first one
// CUDA_VISIBLE_DEVICES names (nvidia-smi does not read that variable, so a
// shard pinned to GPU 1 would otherwise report GPU 0), else GPU 0.
func (p Probe) ReadClocks(ctx context.Context) (*Clocks, error) {
	args := []string{"--query-gpu=" + SMIQuery, "--format=csv"}
	if sel := VisibleGPU(os.Getenv("CUDA_VISIBLE_DEVICES")); sel != "" {
		args = append(args, "-i", sel)
	}
	out, err := p.Command(ctx, "nvidia-smi", args...)
	if err != nil {
		return nil, err
	}
	cs, err := ParseSMI(out)
	if err != nil {
		return nil, err
	}
	return &cs[0], nil
}

// VisibleGPU is the GPU CUDA numbers 0 under CUDA_VISIBLE_DEVICES (an
// index or a GPU-UUID, as nvidia-smi -i takes them; "" when unset). An
// index is the PCI-bus order nvidia-smi uses when CUDA_DEVICE_ORDER is
// PCI_BUS_ID, and on a machine of identical GPUs otherwise.
func VisibleGPU(v string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(v), ",")
	return strings.TrimSpace(first)
}

var cudaVersionRE = regexp.MustCompile(`CUDA Version:\s*([0-9.]+)`)

// Environment is the provenance of a run.
type Environment struct {
	Date         string `json:"date"`
	Host         string `json:"host"`
	OS           string `json:"os"`
	CPUModel     string `json:"cpu_model"`
	NumCPU       int    `json:"num_cpu"`
	GoVersion    string `json:"go_version"`            // abtest's toolchain
	MinferGo     string `json:"minfer_go"`             // from bench JSON when known
	Commit       string `json:"commit"`                // git HEAD of the working tree, else a binary's VCS stamp
	CommitFrom   string `json:"commit_from"`           // where Commit was read (CommitFromGit, ...)
	Dirty        bool   `json:"dirty"`                 // uncommitted changes present (vcs.modified for a stamp)
	CommitNote   string `json:"commit_note,omitempty"` // e.g. the minfer binary was built from another commit
	Binary       string `json:"binary"`                // minfer path
	BinarySHA256 string `json:"binary_sha256"`         //
	Model        string `json:"model"`                 // path or the embedded default
	ModelSize    int64  `json:"model_size"`            //
	ModelSHA256  string `json:"model_sha256"`          //
	// ModelFileType is the model's general.file_type as minfer info names
	// it (Q8_0, Q4_K_M, ...; "" when not read): abtest compare refuses
	// results of two weight types.
	ModelFileType string            `json:"model_file_type,omitempty"`
	Backend       string            `json:"backend"`          // what minfer said it ran on
	GPU           *Clocks           `json:"gpu,omitempty"`    // first reading
	CUDA          string            `json:"cuda,omitempty"`   // from nvidia-smi's banner
	GPUNote       string            `json:"gpu_note"`         // why there is no GPU line
	Levers        map[string]string `json:"levers"`           // effective value of every lever, per registry default
	Pinned        map[string]string `json:"pinned,omitempty"` // values the harness set in every process
	// KernelSources is the hash of the kernel sources the minfer binary
	// embeds, Kernels the kernels file its CUDA runs loaded (from the
	// bench document; minfer refuses a file of other sources).
	KernelSources string          `json:"kernel_sources_sha256,omitempty"`
	Kernels       *schema.Kernels `json:"kernels,omitempty"`
}

// KernelsLine states the kernels a run used: the file, its sha256 and the
// sources it was built from, or why there is none.
func (e Environment) KernelsLine() string {
	switch {
	case e.Kernels != nil:
		return fmt.Sprintf("%s sha256 %s, built from kernel sources %s (%s; %s); minfer's sources %s",
			e.Kernels.Path, e.Kernels.SHA256, e.Kernels.Source, e.Kernels.Compiler, e.Kernels.Flags, e.KernelSources)
	case e.KernelSources != "":
		return "none loaded (no CUDA run); minfer's kernel sources " + e.KernelSources
	}
	return "not reported (a minfer that predates kernel stamps)"
}

// Capture fills what does not need a minfer run.
func (p Probe) Capture(ctx context.Context, bin, model string) Environment {
	e := Environment{Date: time.Now().UTC().Format(time.RFC3339), OS: runtime.GOOS + "/" + runtime.GOARCH,
		NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), Binary: bin}
	e.Host, _ = os.Hostname()
	e.CPUModel = CPUModel("/proc/cpuinfo")
	if out, err := p.Command(ctx, "git", "rev-parse", "HEAD"); err == nil && strings.TrimSpace(out) != "" {
		e.Commit, e.CommitFrom = strings.TrimSpace(out), CommitFromGit
		if st, err := p.Command(ctx, "git", "status", "--porcelain", "--untracked-files=no"); err == nil {
			e.Dirty = strings.TrimSpace(st) != ""
		}
	}
	e.setCommitFromStamps(bin)
	if sum, err := FileSHA256Cached(bin); err != nil {
		// Provenance that could not be read is said, never left blank.
		e.BinarySHA256 = "unreadable: " + err.Error()
	} else {
		e.BinarySHA256 = sum
	}
	if model != "" {
		e.SetModel(model, "")
	} else {
		e.Model = EmbeddedModel
	}
	// One nvidia-smi query answers both "is there a GPU" and the clocks.
	if _, err := p.LookPath("nvidia-smi"); err != nil {
		e.GPUNote = "nvidia-smi not found in PATH: no NVIDIA device on this machine"
	} else if c, err := p.ReadClocks(ctx); err != nil {
		e.GPUNote = "nvidia-smi present but did not answer: " + err.Error()
	} else {
		e.GPU = c
		if out, err := p.Command(ctx, "nvidia-smi"); err == nil {
			if m := cudaVersionRE.FindStringSubmatch(out); m != nil {
				e.CUDA = m[1]
			}
		}
	}
	return e
}

// Where Environment.Commit was read.
const (
	CommitFromGit    = "git HEAD of the working tree"
	CommitFromMinfer = "the minfer binary's build stamp"
	CommitFromAbtest = "abtest's own build stamp"
)

// VCSStamp is the version-control stamp the Go toolchain writes into a binary
// built inside a git work tree with -buildvcs=true (vcs.revision,
// vcs.modified).
type VCSStamp struct {
	Revision string
	Modified bool
}

// ReadVCSStamp reads the stamp of another Go binary (debug/buildinfo);
// ok is false when the file is not a Go binary or carries no vcs.revision.
func ReadVCSStamp(path string) (VCSStamp, bool) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return VCSStamp{}, false
	}
	return stampOf(bi)
}

// The stamp readers, replaced in tests.
var (
	readStamp = ReadVCSStamp
	ownStamp  = OwnVCSStamp
)

// OwnVCSStamp is abtest's own stamp (runtime/debug.ReadBuildInfo).
func OwnVCSStamp() (VCSStamp, bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return VCSStamp{}, false
	}
	return stampOf(bi)
}

func stampOf(bi *debug.BuildInfo) (VCSStamp, bool) {
	var s VCSStamp
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			s.Revision = kv.Value
		case "vcs.modified":
			s.Modified = kv.Value == "true"
		}
	}
	return s, s.Revision != ""
}

// setCommitFromStamps fills Commit from the binaries' VCS stamps when git
// gave none (the device copy of the tree has no .git): the minfer binary's
// stamp first (it is what the arms ran), then abtest's own. When git gave a
// HEAD and the minfer binary was built from another commit, the binary wins
// (a stale copy of a work tree would otherwise name the record, as happened
// on the device machine) and the HEAD goes into the note.
func (e *Environment) setCommitFromStamps(minferBin string) {
	ms, mok := readStamp(minferBin)
	if e.Commit != "" {
		if mok && ms.Revision != e.Commit {
			e.CommitNote = fmt.Sprintf("the work tree here is at git HEAD %s (uncommitted changes: %v), not the commit the minfer binary was built from",
				e.Commit, e.Dirty)
			e.Commit, e.CommitFrom, e.Dirty = ms.Revision, CommitFromMinfer, ms.Modified
		}
		return
	}
	if mok {
		e.Commit, e.CommitFrom, e.Dirty = ms.Revision, CommitFromMinfer, ms.Modified
		return
	}
	if as, ok := ownStamp(); ok {
		e.Commit, e.CommitFrom, e.Dirty = as.Revision, CommitFromAbtest, as.Modified
		e.CommitNote = "the minfer binary carries no VCS stamp"
		return
	}
	e.Commit = "unknown"
	e.CommitNote = "no git work tree here, and neither minfer nor abtest carries a VCS stamp (build them with -buildvcs=true inside the work tree)"
}

// CommitLine is the report's commit row: the revision, where it was read
// and whether the tree was modified.
func (e Environment) CommitLine() string {
	line := e.Commit
	switch e.CommitFrom {
	case "":
		// an older record, or unknown
		if e.Dirty {
			line += " (working tree has uncommitted changes)"
		}
	case CommitFromGit:
		line += fmt.Sprintf(" (from the %s; uncommitted changes: %v)", e.CommitFrom, e.Dirty)
	default:
		line += fmt.Sprintf(" (from %s; modified: %v)", e.CommitFrom, e.Dirty)
	}
	if e.CommitNote != "" {
		line += "; " + e.CommitNote
	}
	return line
}

// EmbeddedModel is the model line before minfer has said where its embedded
// default model lives.
const EmbeddedModel = "(embedded default)"

// SetModel records the model file the arms ran: its path, its real size
// (stat) and its sha256. For the embedded default the path is the one minfer
// reports (bench JSON "model"), and the line keeps saying it is the embedded
// default. reported is the sha256 minfer printed ("" when none); when the
// file can be read its own hash wins and a mismatch is noted in the line.
func (e *Environment) SetModel(path, reported string) {
	label := path
	if e.Model == EmbeddedModel {
		label = EmbeddedModel + " " + path
	}
	e.Model = label
	e.ModelSize = 0
	e.ModelSHA256 = reported
	st, err := os.Stat(path)
	if err != nil {
		e.Model += " (not readable by abtest: " + err.Error() + ")"
		return
	}
	e.ModelSize = st.Size()
	if h, err := FileSHA256Cached(path); err == nil {
		if reported != "" && reported != h {
			e.Model += fmt.Sprintf(" (minfer reported sha256 %s)", reported)
		}
		e.ModelSHA256 = h
	}
}

// ShortCommit is the first 9 hex digits (or "unknown").
func (e Environment) ShortCommit() string {
	if len(e.Commit) >= 9 && e.Commit != "unknown" {
		return e.Commit[:9]
	}
	return e.Commit
}

// CPUModel reads "model name" from a cpuinfo file.
func CPUModel(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// FileSHA256 hashes a file.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// FileSHA256Cached is FileSHA256 remembered across processes
// (internal/filehash: an entry stands only while the file's identity and
// change time do). A failure of the cache alone costs a full read, never a
// wrong hash, so it is not reported here.
func FileSHA256Cached(path string) (string, error) {
	r, err := filehash.SHA256(path)
	if err != nil {
		return "", err
	}
	return r.SHA256, nil
}
