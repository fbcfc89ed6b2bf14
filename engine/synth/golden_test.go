package synth

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
)

// The bytes of a synthetic model are part of what the gates compare (the
// default model, the cached real-shape files): they change only with
// GeneratorVersion. These sums were recorded by the generator as it was
// when the tensor table moved into the architecture registry. A tiny shape
// is written and its file hashed; a real shape is too large for a unit
// test, so its plan is hashed (metadata, tensor names, shapes, types and
// value distributions in file order: a tensor's values depend only on its
// name, its distribution and the seed).
func TestWrite_BytesMatchTheRecordedSums(t *testing.T) {
	cases := []struct{ shape, typ, want string }{
		{"qwen2-tiny", "F16", "91ffebd9ce7e7739248ad9fc64987b91f3a3583f510c20c2e441ed9b72cd6983"},
		{"qwen2-tiny", "Q4_K_M", "153873332fc071a16b7be37a61f2429b916e57ce6c3613af051c6010a68825e1"},
		{"qwen3-tiny", "F16", "7da65563a193def70c1b9dd0b37185d7c7c66f4193d99312b1683ccd1ffa6cf0"},
		{"qwen3-tiny", "Q8_0", "56d769164466df08e0f0abb1c1c88eeb656ad7ef50806a98ef62ac9f00ca8a8b"},
		{"qwen2-0.5b", "Q8_0", "daaad090f71c8fecf3fa851a1f56a9cbf0518b25aaa1965bce7c9d4adfe0bd70"},
		{"qwen3-0.6b", "Q4_K_M", "eca1c36aca94e74c2e39f5584871c30ba71ce152a8c35cb1bb025eb083aa7183"},
		{"qwen2-7b", "Q4_K_M", "1ffef22a31e48272f4fb39a39562f4f131b3ab5620c6fba263e042cc74db434e"},
	}
	for _, c := range cases {
		qt, mix, err := ParseType(c.typ)
		if err != nil {
			t.Fatal(err)
		}
		opts := Options{Shape: c.shape, Type: qt, Mix: mix, Seed: 5}
		var got string
		if strings.HasSuffix(c.shape, "-tiny") {
			got = fmt.Sprintf("%x", fileHash(t, opts))
		} else {
			got = planHash(t, opts)
		}
		if got != c.want {
			t.Errorf("%s %s: sha256 %s, want %s", c.shape, c.typ, got, c.want)
		}
	}
}

func planHash(t *testing.T, opts Options) string {
	t.Helper()
	p, err := newPlan(opts)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, kv := range p.kvs {
		fmt.Fprintf(h, "%s=%v\n", kv.Key, kv.Value)
	}
	for _, ts := range p.tensors {
		fmt.Fprintf(h, "%s %v %s %+v\n", ts.name, ts.dims, ts.typ, ts.d)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}
