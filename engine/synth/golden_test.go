package synth

import (
	"crypto/sha256"
	"fmt"
	"testing"
)

// The bytes of a synthetic model are part of what the gates compare (the
// default model, the cached real-shape files): they change only with
// GeneratorVersion. These sums were recorded by the generator as it was
// when the tensor table moved into the architecture registry.
func TestWrite_BytesMatchTheRecordedSums(t *testing.T) {
	cases := []struct {
		shape, typ string
		want       string
	}{
		{"qwen2-tiny", "F16", "91ffebd9ce7e7739248ad9fc64987b91f3a3583f510c20c2e441ed9b72cd6983"},
		{"qwen2-tiny", "Q4_K_M", "153873332fc071a16b7be37a61f2429b916e57ce6c3613af051c6010a68825e1"},
		{"qwen3-tiny", "F16", "7da65563a193def70c1b9dd0b37185d7c7c66f4193d99312b1683ccd1ffa6cf0"},
		{"qwen3-tiny", "Q8_0", "56d769164466df08e0f0abb1c1c88eeb656ad7ef50806a98ef62ac9f00ca8a8b"},
	}
	for _, c := range cases {
		qt, mix, err := ParseType(c.typ)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprintf("%x", fileHash(t, Options{Shape: c.shape, Type: qt, Mix: mix, Seed: 5}))
		if got != c.want {
			t.Errorf("%s %s: sha256 %s, want %s", c.shape, c.typ, got, c.want)
		}
	}
}

// The real-shape files are too large to write in a unit test; their plan
// (metadata, tensor names, shapes and types, in file order) is hashed
// instead: the values of each tensor depend only on its name and the seed.
func TestPlan_RealShapesMatchTheRecordedSums(t *testing.T) {
	cases := []struct {
		shape, typ string
		want       string
	}{
		{"qwen2-0.5b", "Q8_0", "daaad090f71c8fecf3fa851a1f56a9cbf0518b25aaa1965bce7c9d4adfe0bd70"},
		{"qwen3-0.6b", "Q4_K_M", "eca1c36aca94e74c2e39f5584871c30ba71ce152a8c35cb1bb025eb083aa7183"},
		{"qwen2-7b", "Q4_K_M", "1ffef22a31e48272f4fb39a39562f4f131b3ab5620c6fba263e042cc74db434e"},
	}
	for _, c := range cases {
		qt, mix, err := ParseType(c.typ)
		if err != nil {
			t.Fatal(err)
		}
		p, err := newPlan(Options{Shape: c.shape, Type: qt, Mix: mix, Seed: 5})
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
		if got := fmt.Sprintf("%x", h.Sum(nil)); got != c.want {
			t.Errorf("%s %s: plan sha256 %s, want %s", c.shape, c.typ, got, c.want)
		}
	}
}
