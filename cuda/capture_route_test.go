package cuda

import (
	"strconv"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

// The decode route by depth against a captured graph, without a device: a
// recording notes the decode family its attention took (capture.noteAttn,
// which attnRoute calls at Execute), the captured entry keeps the note (as
// finishCapture copies it) and staleReason compares it with the family the
// length SetKVLength gave would take. The device test
// (attn_decode_tc_device_test.go) crosses the threshold through real
// captures and replays.

// crBackend is a device-less Backend with an f16 cache of 32768 cells
// under the settings env.
func crBackend(t *testing.T, env ...string) *Backend {
	t.Helper()
	lv, err := levers.Parse(env)
	if err != nil {
		t.Fatal(err)
	}
	b := cwBackend(movesGeneration)
	b.lv, b.kvSpec = lv, graph.KVSpec{Format: kv.F16, NLayer: 1, NCtx: 32768, RowLen: 128}
	return b
}

// crCapture records a split whose attention of nt tokens took the family
// attnFamily gives at the backend's KV length and keeps it as captured.
func crCapture(b *Backend, nt int) *captured {
	b.cap.recording = true
	b.cap.noteAttn(attnFamily(nt, b.kvLen, b.lv, b.kvSpec.Format), nt)
	e := &captured{nt: nt, gen: b.pool.gen, kvStamp: b.kvStamp, reregistered: b.reregistered, attnFam: b.cap.attnFam, attnNT: b.cap.attnNT}
	b.cap.recording, b.cap.attnFam, b.cap.attnNT = false, "", 0
	return e
}

// TestCaptureValidity_DecodeGraphGoesStaleWhereTheRouteChangesSide: with
// MINFER_ATTN_DECODE_TC_FROM=48 a decode graph captured at 47 cells (the
// lean family) replays below 48 and is stale from 48 on, naming the route
// and both lengths; one captured on the tensor cores is valid from 48 up
// and stale again below (a truncated conversation); a prefill graph and a
// graph without attention never go stale for the route, nor does a decode
// graph when the route cannot change (FROM=0, the lever off).
func TestCaptureValidity_DecodeGraphGoesStaleWhereTheRouteChangesSide(t *testing.T) {
	b := crBackend(t, "MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_FROM=48")
	b.SetKVLength(47)
	lean := crCapture(b, 1)
	if lean.attnFam != attnDecode2 {
		t.Fatalf("captured at 47 cells on %q, want %s", lean.attnFam, attnDecode2)
	}
	for _, n := range []int{1, 30, 47} {
		b.SetKVLength(n)
		if r := b.staleReason(lean); r != "" {
			t.Errorf("lean graph at %d cells: stale (%s)", n, r)
		}
	}
	for _, n := range []int{48, 49, 32768} {
		b.SetKVLength(n)
		r := b.staleReason(lean)
		if want := "decode attention route: tensor cores from 48 KV cells, now " + strconv.Itoa(n); !strings.HasPrefix(r, want) {
			t.Errorf("lean graph at %d cells: %q, want %q...", n, r, want)
		}
	}
	b.SetKVLength(48)
	tc := crCapture(b, 1)
	if tc.attnFam != attnDecodeTC || b.staleReason(tc) != "" {
		t.Fatalf("captured at 48 cells on %q, stale %q: want %s, valid", tc.attnFam, b.staleReason(tc), attnDecodeTC)
	}
	b.SetKVLength(12)
	if r := b.staleReason(tc); !strings.HasPrefix(r, routeStale) {
		t.Errorf("tensor-core graph at 12 cells: %q, want the route's reason", r)
	}
	b.SetKVLength(40)
	prefill := crCapture(b, 64)
	b.cap.recording = true
	noAttn := &captured{gen: b.pool.gen, kvStamp: b.kvStamp, reregistered: b.reregistered, attnFam: b.cap.attnFam}
	b.cap.recording = false
	for _, n := range []int{1, 47, 48, 32768} {
		b.SetKVLength(n)
		for name, e := range map[string]*captured{"prefill": prefill, "no attention": noAttn} {
			if r := b.staleReason(e); r != "" || e.attnFam != "" {
				t.Errorf("%s graph (noted %q) at %d cells: stale %q", name, e.attnFam, n, r)
			}
		}
	}
	b.cap.noteAttn(attnDecode2, 1) // not recording: nothing noted
	if b.cap.attnFam != "" {
		t.Errorf("a direct execution noted %q", b.cap.attnFam)
	}
	for _, env := range [][]string{{"MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_FROM=0"}, {"MINFER_ATTN_DECODE_TC=0", "MINFER_ATTN_DECODE_TC_FROM=48"}} {
		b := crBackend(t, env...)
		b.SetKVLength(1)
		e := crCapture(b, 1)
		for _, n := range []int{1, 47, 48, 32768} {
			b.SetKVLength(n)
			if r := b.staleReason(e); r != "" {
				t.Errorf("%v, graph captured at 1 cell on %s, at %d cells: stale %q", env, e.attnFam, n, r)
			}
		}
	}
}
