package cuda

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

// CUDA graphs. A split is keyed by graph.SplitKey (graph uid, node range).
// Executions 1 and 2 of a key run as direct launches; the 3rd is captured
// and every later one replays the instantiated graph (BeginSplit returns
// replayed = true). A captured graph is valid at the pool generation and KV
// layout it was captured at, while every weight its nodes read is still
// the registration they read, and while the step's KV length takes the
// decode attention family it recorded (staleReason: the route by depth,
// MINFER_ATTN_DECODE_TC_FROM); a change of any invalidates it and the key
// warms up again. Decode-shaped splits (nt = 1) always capture,
// prefill-shaped ones unless MINFER_NO_PREFILL_CAPTURE; MINFER_NO_CUDA_GRAPH
// turns graphs off.
//
// The capture window. cuda/driver runs all device work on one locked OS
// thread, and a thread-local window must open and close inside one
// Device.Do (between two Do calls another backend's work would run on the
// same thread, inside the window). So on a capturing execution Execute
// checks each node and records its launch as a closure instead of issuing
// it; Synchronize (the split boundary) then opens the window, issues the
// recorded launches, ends the capture, instantiates the graph and launches
// it once so the step still produces its output, all inside one Do. No
// synchronize happens inside the window. A node whose launch fails inside
// the window aborts the capture: the window is ended, its graph discarded,
// graphs are disabled for the rest of the session and the error (naming the
// node) is returned. The aborted step's outputs were never produced.
//
// What a captured graph depends on. Its nodes' parameters are device
// pointers baked in at capture: the pool's buffers and the scratch and
// workspace regions (pool generation), the KV regions (kvStamp), and the
// weights the split's nodes resolved (b.weight while recording, kept in
// captured.weights as the *devWeight each name resolved to). A devWeight is
// never changed after its registration: registering a name again at
// another size makes a new devWeight with a new pointer (the old memory
// stays until Close), and weight allocations do not move the pool
// generation (pool.go movesGeneration). So registering a weight the graph
// does not read leaves it valid, and registering again a weight it reads
// invalidates exactly the graphs that read it: they never replay a stale
// pointer. A registration that grows the shared Q8_1 activation scratch
// (ensureActQ8, a MemActivations allocation) still moves the generation.
//
// Registration from another goroutine (RegisterWeight while the engine's
// goroutine runs a split). Two things order it. (1) driver.Device.Do runs
// one function at a time on the device thread, in the order the calls
// arrive, and the capture window opens and closes inside one Do
// (finishCapture), so no registration's upload can run inside a window.
// (2) b.mu, the backend's host-state lock, is held by RegisterWeight for
// the whole registration and by every entry point of the engine's
// goroutine that reads what a registration writes (BeginSplit, Execute,
// Synchronize, Alloc, Free, SupportsOp, SupportsFused, ...): a
// registration waits for the call in progress (a whole capture window
// included, Synchronize holding b.mu through finishCapture) and runs
// between two calls. Between two Execute calls of a recording it is
// harmless: a node recorded before it keeps the devWeight it resolved, and
// captured.weights holds that same devWeight, so a replaced weight shows at
// the next BeginSplit; scratch pointers are read by the launches
// themselves, inside the window's Do, where the generation the graph keeps
// is read too.

// captureWarmup is how many direct executions a key runs before it is
// captured (llama.cpp warms up twice).
const captureWarmup = 2

type captured struct {
	runs    int               // executions since the key was (re)warmed
	nt      int               // largest token count its nodes showed (1: decode-shaped)
	exec    *driver.GraphExec // nil until captured
	gen     uint64            // pool generation at capture
	kvStamp uint64            // KV layout stamp at capture
	kernels map[string]int64  // launches the graph holds, per kernel (census)
	// weights are the registrations the captured nodes resolved, by name:
	// the graph is stale once b.weights holds another for any of them.
	weights map[string]*devWeight
	// reregistered is b.reregistered at capture.
	reregistered uint64
	// attnFam is the decode attention family its attentions took
	// (attnDecode2 or attnDecodeTC; "" when it holds none) and attnNT
	// their token count: the route by depth would take another at a KV
	// length across MINFER_ATTN_DECODE_TC_FROM (decodeRouteStale).
	attnFam string
	attnNT  int
}

// routeStale begins staleReason's reason for a graph whose decode
// attention the route by depth no longer takes (CaptureStats counts them).
const routeStale = "decode attention route: "

// decodeRouteStale says why a graph captured with its decode attentions of
// nt tokens on family fam ("" when it holds none: a prefill) cannot replay
// at a step whose window reads kvLen cells: the route by depth (attnFamily)
// takes the other family there. Its kernels read kv_len on the device, so
// within one family any fill replays; across the threshold the captured
// launches are the wrong kernels. "" when the family is the same.
func decodeRouteStale(fam string, nt, kvLen int, lv levers.Config, kvf kv.Format) string {
	if fam == "" {
		return ""
	}
	if now := attnFamily(nt, kvLen, lv, kvf); now != fam {
		return fmt.Sprintf("%stensor cores from %d KV cells, now %d (captured on %s, the step takes %s)", routeStale, lv.AttnDecodeTCFrom, kvLen, fam, now)
	}
	return ""
}

// staleReason says why the captured graph e cannot replay now, "" when it
// can: the pool generation or the KV layout moved since its capture, the
// step's KV length takes another decode attention family than the one it
// recorded (decodeRouteStale), or a weight it reads was registered again
// (a new devWeight, a new pointer). Weights it does not read are not
// looked at.
func (b *Backend) staleReason(e *captured) string {
	if e.gen != b.pool.gen {
		return fmt.Sprintf("pool generation %d, captured at %d", b.pool.gen, e.gen)
	}
	if e.kvStamp != b.kvStamp {
		return fmt.Sprintf("KV layout stamp %d, captured at %d", b.kvStamp, e.kvStamp)
	}
	if why := decodeRouteStale(e.attnFam, e.attnNT, b.kvLen, b.lv, b.kvSpec.Format); why != "" {
		return why
	}
	if e.reregistered == b.reregistered {
		return "" // no name was registered again since the capture
	}
	for name, w := range e.weights {
		if b.weights[name] != w {
			return "weight " + name + " was registered again"
		}
	}
	return ""
}

// CaptureStats counts what the graph machinery did (tests and reports).
type CaptureStats struct {
	Captures      int  // graphs captured and instantiated
	Replays       int  // BeginSplit calls answered by a replay
	Invalidations int  // captured graphs dropped for a pool-generation or KV-layout change, a weight they read or the decode route
	Aborts        int  // capture windows aborted by a node error
	Disabled      bool // graphs are off for this session
	// DecodeCaptures and DecodeReplays are the part of Captures and
	// Replays of decode-shaped splits (nt = 1): a conversation that keeps
	// its decode graph across turns captures it once (engine/chat's gate).
	DecodeCaptures int
	DecodeReplays  int
	// Fallbacks counts graph failures that were not a node's (a capture
	// that could not end, an instantiation or a graph launch that failed):
	// graphs went off for the session and the split ran with direct
	// launches (the design's rule), logged once each.
	Fallbacks int
	// WeightInvalidations is the part of Invalidations caused by a weight
	// the graph reads being registered again (staleReason).
	WeightInvalidations int
	// RouteInvalidations is the part caused by the KV length crossing
	// MINFER_ATTN_DECODE_TC_FROM (decodeRouteStale): one a decode graph a
	// crossing.
	RouteInvalidations int
}

type capture struct {
	enabled        bool // MINFER_NO_CUDA_GRAPH unset and no abort yet
	prefillCapture bool
	warmup         int // direct executions before a capture (tests lower it)

	keys map[graph.SplitKey]*captured
	cur  *captured // the open split's entry (nil: none, or graphs off)
	key  graph.SplitKey

	recording bool           // the open split is being recorded for capture
	pending   []func() error // its launches, in order
	// used are the weights the recording's nodes resolved (b.weight), the
	// captured graph's weights once it is captured.
	used map[string]*devWeight
	// attnFam and attnNT are the decode attention family the recording's
	// attentions took and their token count (noteAttn), the captured
	// graph's once it is captured.
	attnFam string
	attnNT  int

	// windowHook, when set (tests), runs inside the capture window on the
	// device thread, after the recorded launches were issued and before the
	// capture ends: it must make no driver call.
	windowHook func(key graph.SplitKey, nt int)

	stats CaptureStats
}

func (c *capture) beginKey(key graph.SplitKey) *captured {
	e := c.keys[key]
	if e == nil {
		e = &captured{}
		c.keys[key] = e
	}
	c.cur, c.key = e, key
	return e
}

// beginSplit implements the state machine of graph.Backend.BeginSplit.
func (b *Backend) beginSplit(key graph.SplitKey) (bool, error) {
	c := &b.cap
	c.cur, c.recording, c.pending, c.used = nil, false, nil, nil
	c.attnFam, c.attnNT = "", 0
	if !c.enabled {
		return false, nil
	}
	e := c.beginKey(key)
	if e.exec != nil {
		stale := b.staleReason(e)
		if stale == "" {
			// The split's start event goes in the replay's own Do, right
			// before the launch (timing.go).
			var timerErr error
			err := b.dev.Do(func() error {
				if timerErr = b.timer.begin(b.dev, b.s); timerErr != nil {
					return nil
				}
				return e.exec.Launch(b.s)
			})
			if timerErr != nil {
				return false, fmt.Errorf("cuda: split %v: %w", key, timerErr)
			}
			if err != nil {
				// The graph failed, not a node: graphs off, and the
				// scheduler executes the split with direct launches.
				b.timer.open = false
				b.disableGraphs()
				c.stats.Fallbacks++
				b.logf("cuda: replay of split %v failed (%v); CUDA graphs are off for this session, running with direct launches", key, err)
				return false, nil
			}
			for name, n := range e.kernels {
				b.k.AddCensus(name, n)
			}
			c.stats.Replays++
			if e.nt <= 1 {
				c.stats.DecodeReplays++
			}
			return true, nil
		}
		if err := b.dev.Do(e.exec.Destroy); err != nil {
			return false, fmt.Errorf("cuda: drop stale graph of split %v: %w", key, err)
		}
		*e = captured{nt: e.nt}
		c.stats.Invalidations++
		if strings.HasPrefix(stale, "weight ") {
			c.stats.WeightInvalidations++
		}
		if strings.HasPrefix(stale, routeStale) {
			c.stats.RouteInvalidations++
		}
	}
	e.runs++
	if e.runs > c.warmup && (e.nt <= 1 || c.prefillCapture) {
		c.recording, c.used = true, map[string]*devWeight{}
	}
	return false, nil
}

// noteNode records the token count a node shows, so the key knows whether
// it is decode- or prefill-shaped before its capturing execution.
func (c *capture) noteNode(n *graph.Node) {
	if c.cur == nil {
		return
	}
	nt := 0
	switch n.Op {
	case graph.OpGetRows, graph.OpMatMul:
		nt = n.Shape[1]
	case graph.OpRope:
		nt = n.Shape[2]
	case graph.OpAttn, graph.OpAttnMatMulAdd:
		nt = n.Shape[1]
	}
	c.cur.nt = max(c.cur.nt, nt)
}

// noteAttn records, while a split is recorded, the decode attention
// family its attention of nt tokens took (attnRoute): every attention of a
// split reads the same window, so one note serves them all.
func (c *capture) noteAttn(fam string, nt int) {
	if c.recording && attnDecodeFamily(fam) {
		c.attnFam, c.attnNT = fam, nt
	}
}

// abandon drops a recording whose node failed its host-side check: nothing
// was launched, and graphs are disabled like any capture abort.
func (b *Backend) abandon(err error) {
	b.cap.recording, b.cap.pending, b.cap.used = false, nil, nil
	b.cap.stats.Aborts++
	b.disableGraphs()
	b.logf("cuda: capture of split %v aborted (%v); CUDA graphs are disabled for this session", b.cap.key, err)
}

// disableGraphs turns graphs off for the session and destroys every
// captured graph. Errors from destroying are logged, not returned: the
// caller is already reporting the reason graphs went off.
func (b *Backend) disableGraphs() {
	c := &b.cap
	c.enabled, c.stats.Disabled = false, true
	c.recording, c.pending, c.cur, c.used = false, nil, nil, nil
	for _, e := range c.keys {
		if e.exec != nil {
			x := e.exec
			if err := b.dev.Do(x.Destroy); err != nil {
				b.logf("cuda: destroy graph exec: %v", err)
			}
			e.exec = nil
		}
	}
}

// fallBack finishes a split whose capture failed in the graph machinery
// (ending the capture, instantiating or launching the graph), not in a
// node: graphs go off for the session, with one log line, and the split's
// recorded launches run directly, so the step carries on. A capture still
// open (its end failed) is ended and its graph dropped first.
func (b *Backend) fallBack(key graph.SplitKey, pending []func() error, cause error) error {
	c := &b.cap
	b.disableGraphs()
	c.stats.Fallbacks++
	b.logf("cuda: CUDA graph of split %v failed (%v); CUDA graphs are off for this session, running with direct launches", key, cause)
	err := b.dev.Do(func() error {
		if st, err := b.s.IsCapturing(); err != nil {
			return err
		} else if st != driver.CaptureNone {
			g, err := b.s.EndCapture()
			if g != nil {
				err = errors.Join(err, g.Destroy())
			}
			if err != nil {
				return fmt.Errorf("ending the failed capture: %w", err)
			}
		}
		for _, launch := range pending {
			if err := launch(); err != nil {
				return err
			}
		}
		if err := b.timer.mark(b.s); err != nil {
			return err
		}
		if err := b.s.Synchronize(); err != nil {
			return err
		}
		b.stage.synced()
		return b.timer.done()
	})
	if err != nil {
		b.timer.open = false
		return fmt.Errorf("cuda: split %v after its graph failed (%v), with direct launches: %w", key, cause, err)
	}
	return nil
}

// finishCapture runs the recorded split inside one capture window, then
// instantiates the graph, launches it once and waits for it (the split
// boundary). A node error inside the window aborts.
func (b *Backend) finishCapture() error {
	c := &b.cap
	e, key, pending, used := c.cur, c.key, c.pending, c.used
	attnFam, attnNT := c.attnFam, c.attnNT
	c.recording, c.pending, c.used = false, nil, nil
	c.attnFam, c.attnNT = "", 0
	hook := c.windowHook
	var before map[string]int64
	census := b.k.Census() != nil
	if census {
		before = b.k.Census()
	}
	var nodeErr error
	launched := false // the graph ran: its split must not run again
	err := b.dev.Do(func() error {
		b.k.SetDirect(false)
		defer b.k.SetDirect(true)
		if err := b.s.BeginCapture(); err != nil {
			return err
		}
		for _, launch := range pending {
			if err := launch(); err != nil {
				nodeErr = err
				g, endErr := b.s.EndCapture()
				if g != nil {
					endErr = errors.Join(endErr, g.Destroy())
				}
				return errors.Join(err, endErr)
			}
		}
		if hook != nil {
			hook(key, e.nt)
		}
		g, err := b.s.EndCapture()
		if err != nil {
			return err
		}
		x, err := g.Instantiate()
		if derr := g.Destroy(); err == nil {
			err = derr
		}
		if err != nil {
			if x != nil {
				x.Destroy()
			}
			return err
		}
		if err := x.Launch(b.s); err != nil {
			return errors.Join(err, x.Destroy())
		}
		launched = true
		// The split's end event: after the window closed, before the sync
		// (its start was recorded at BeginSplit, before the window opened).
		if err := b.timer.mark(b.s); err != nil {
			return errors.Join(err, x.Destroy())
		}
		if err := b.s.Synchronize(); err != nil {
			return errors.Join(err, x.Destroy())
		}
		b.stage.synced()
		e.exec, e.gen, e.kvStamp, e.weights, e.reregistered = x, b.pool.gen, b.kvStamp, used, b.reregistered
		e.attnFam, e.attnNT = attnFam, attnNT
		return b.timer.done()
	})
	if err != nil && nodeErr == nil && !launched {
		return b.fallBack(key, pending, err)
	}
	if err != nil {
		b.timer.open = false
		c.stats.Aborts++
		b.disableGraphs()
		what := "capture"
		if nodeErr != nil {
			what = "a node error inside the capture window"
		}
		b.logf("cuda: capture of split %v aborted by %s: %v; CUDA graphs are disabled for this session", key, what, err)
		return fmt.Errorf("cuda: capture of split %v aborted (CUDA graphs are now disabled for this session): %w", key, err)
	}
	c.stats.Captures++
	if e.nt <= 1 {
		c.stats.DecodeCaptures++
	}
	if census {
		after := b.k.Census()
		e.kernels = map[string]int64{}
		for name, n := range after {
			if d := n - before[name]; d > 0 {
				e.kernels[name] = d
			}
		}
	}
	return nil
}

// CaptureStats returns what the graph machinery has done so far.
func (b *Backend) CaptureStats() CaptureStats {
	defer b.unlock(b.lock())
	return b.cap.stats
}

// capturedKernels lists the kernels of a captured key (tests).
func (b *Backend) capturedKernels(key graph.SplitKey) []string {
	e := b.cap.keys[key]
	if e == nil {
		return nil
	}
	var out []string
	for n := range e.kernels {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// closeGraphs destroys every captured graph. Inside dev.Do.
func (c *capture) close() error {
	var first error
	for _, e := range c.keys {
		if e.exec != nil {
			if err := e.exec.Destroy(); err != nil && first == nil {
				first = err
			}
			e.exec = nil
		}
	}
	c.keys = map[graph.SplitKey]*captured{}
	return first
}
