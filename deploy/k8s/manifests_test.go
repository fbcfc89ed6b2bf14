package k8s

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// strictDecode decodes one YAML document into out the way the API server
// refuses a bad manifest: duplicate keys and fields the type does not have
// are errors (a misspelt or misplaced field would otherwise vanish).
func strictDecode(doc []byte, out any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("more than one value")
	}
	return nil
}

// decodeTyped decodes doc into the API type of its apiVersion and kind; a
// kind this package does not declare is an error, so a new manifest comes
// with its checks.
func decodeTyped(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var out any
	switch tm.APIVersion + " " + tm.Kind {
	case "batch/v1 Job":
		out = &batchv1.Job{}
	case "v1 PersistentVolumeClaim":
		out = &corev1.PersistentVolumeClaim{}
	case "v1 ConfigMap":
		out = &corev1.ConfigMap{}
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		out = &kusttypes.Kustomization{}
	default:
		return nil, fmt.Errorf("unexpected apiVersion %q kind %q", tm.APIVersion, tm.Kind)
	}
	return out, strictDecode(doc, out)
}

// TestManifests_DecodeStrictly: every YAML file here is one document of a
// known type, with no unknown field.
func TestManifests_DecodeStrictly(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeTyped(b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// night is what `kubectl apply -k .` would create, plus the claim of
// pvc.yaml, applied on its own.
type night struct {
	shards, merge *batchv1.Job
	params        *corev1.ConfigMap // RUN_ID, SHARDS, ...
	scripts       *corev1.ConfigMap
	claim         *corev1.PersistentVolumeClaim
	kust          *kusttypes.Kustomization
}

func render(t *testing.T) night {
	t.Helper()
	// The kustomize library kubectl embeds, on this folder: names get the
	// run's suffix, the ConfigMaps their content hash, the references follow.
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	var n night
	for _, r := range m.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, err := decodeTyped(doc)
		if err != nil {
			t.Fatalf("rendered %s %s: %v", r.GetKind(), r.GetName(), err)
		}
		switch o := obj.(type) {
		case *batchv1.Job:
			switch o.Labels["app.kubernetes.io/component"] {
			case "shard":
				n.shards = o
			case "merge":
				n.merge = o
			default:
				t.Fatalf("job %s: no component label shard or merge", o.Name)
			}
		case *corev1.ConfigMap:
			if _, ok := o.Data["RUN_ID"]; ok {
				n.params = o
			} else {
				n.scripts = o
			}
		default:
			t.Fatalf("rendered %s %s: not expected in the kustomization", r.GetKind(), r.GetName())
		}
	}
	if n.shards == nil || n.merge == nil || n.params == nil || n.scripts == nil {
		t.Fatalf("kustomize build: want a shard Job, a merge Job and two ConfigMaps, got %d resources", m.Size())
	}
	n.claim = &corev1.PersistentVolumeClaim{}
	n.kust = &kusttypes.Kustomization{}
	for f, out := range map[string]any{"pvc.yaml": n.claim, "kustomization.yaml": n.kust} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := strictDecode(b, out); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	return n
}

// flags maps each --name=value (or --name value) of args to its value.
func flags(args []string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		if k, v, ok := strings.Cut(a, "="); ok {
			m[k] = v
		} else if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			m[a] = args[i+1]
			i++
		} else {
			m[a] = ""
		}
	}
	return m
}

// varRef is the kubelet's $(NAME) expansion in command and args.
var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkVarRefs: every $(NAME) in c's command and args names a variable the
// container has; the kubelet leaves an unknown one as literal text, so a typo
// would put results under a folder named "$(RUN_ID)".
func checkVarRefs(t *testing.T, c corev1.Container, cms map[string]*corev1.ConfigMap, extra ...string) {
	t.Helper()
	have := map[string]bool{}
	for _, e := range extra {
		have[e] = true
	}
	for _, e := range c.Env {
		have[e.Name] = true
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			continue
		}
		cm := cms[ef.ConfigMapRef.Name]
		if cm == nil {
			t.Errorf("container %s: envFrom ConfigMap %s is not in the kustomization", c.Name, ef.ConfigMapRef.Name)
			continue
		}
		for k := range cm.Data {
			have[k] = true
		}
	}
	for _, s := range append(append([]string{}, c.Command...), c.Args...) {
		for _, m := range varRef.FindAllStringSubmatch(s, -1) {
			if !have[m[1]] {
				t.Errorf("container %s: %q refers to $(%s), which it does not have", c.Name, s, m[1])
			}
		}
	}
}

// mountsClaim: c mounts, at path, a volume of spec backed by the claim.
func mountsClaim(spec corev1.PodSpec, c corev1.Container, path, claim string) bool {
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != path {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
				return true
			}
		}
	}
	return false
}

func TestShardJob_IndexedOneGPUPerShardReadsItsIndex(t *testing.T) {
	n := render(t)
	j := n.shards
	shards, err := strconv.Atoi(n.params.Data["SHARDS"])
	if err != nil || shards < 1 {
		t.Fatalf("SHARDS=%q in kustomization.yaml: want a count", n.params.Data["SHARDS"])
	}
	if j.Spec.CompletionMode == nil || *j.Spec.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("completionMode %v, want Indexed: the pods need JOB_COMPLETION_INDEX", deref(j.Spec.CompletionMode))
	}
	if j.Spec.Completions == nil || j.Spec.Parallelism == nil || int(*j.Spec.Completions) != shards || int(*j.Spec.Parallelism) != shards {
		t.Errorf("completions %v, parallelism %v: want both SHARDS=%d", deref(j.Spec.Completions), deref(j.Spec.Parallelism), shards)
	}
	pod := j.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never (a podFailurePolicy needs it; a retry is a new pod)", pod.RestartPolicy)
	}
	// The API server refuses FailIndex without a per-index backoff limit.
	if j.Spec.BackoffLimitPerIndex == nil {
		t.Errorf("no backoffLimitPerIndex: a failed shard would fail every other")
	}
	if j.Spec.ActiveDeadlineSeconds == nil {
		t.Errorf("no activeDeadlineSeconds: a hung shard would hold its GPU and the merge forever")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if q, ok := c.Resources.Limits["nvidia.com/gpu"]; !ok || q.Value() != 1 {
		t.Errorf("limits %v: want nvidia.com/gpu: 1", c.Resources.Limits)
	}
	if pfp := j.Spec.PodFailurePolicy; pfp != nil {
		for _, r := range pfp.Rules {
			if r.OnExitCodes != nil && r.OnExitCodes.ContainerName != nil && *r.OnExitCodes.ContainerName != c.Name {
				t.Errorf("podFailurePolicy names container %q, the shard's is %q", *r.OnExitCodes.ContainerName, c.Name)
			}
		}
	}
	cmd := append(append([]string{}, c.Command...), c.Args...)
	if len(cmd) < 2 || filepath.Base(cmd[0]) != "abtest" || cmd[1] != "nightly" {
		t.Fatalf("command %q: want abtest nightly ...", cmd)
	}
	f := flags(cmd[2:])
	if want := fmt.Sprintf("auto/%d", shards); f["--shard"] != want {
		t.Errorf("--shard %q, want %q (the index from JOB_COMPLETION_INDEX, N = SHARDS)", f["--shard"], want)
	}
	if want := "/results/$(RUN_ID)/shard-$(JOB_COMPLETION_INDEX)"; f["--out"] != want {
		t.Errorf("--out %q, want %q (the merge reads it there)", f["--out"], want)
	}
	checkVarRefs(t, c, map[string]*corev1.ConfigMap{n.params.Name: n.params}, "JOB_COMPLETION_INDEX")
	if !mountsClaim(pod, c, "/results", n.claim.Name) {
		t.Errorf("the shard does not mount claim %s at /results", n.claim.Name)
	}
}

func TestMergeJob_WaitsForEveryShardThenMerges(t *testing.T) {
	n := render(t)
	j := n.merge
	pod := j.Spec.Template.Spec
	cms := map[string]*corev1.ConfigMap{n.params.Name: n.params}
	if len(pod.InitContainers) != 1 || len(pod.Containers) != 1 {
		t.Fatalf("%d init containers, %d containers: want one of each (wait, merge)", len(pod.InitContainers), len(pod.Containers))
	}
	wait, merge := pod.InitContainers[0], pod.Containers[0]

	// The wait runs the script of this folder, from the generated ConfigMap.
	if len(wait.Command) != 2 || wait.Command[1] != "/scripts/wait-for-shards.sh" {
		t.Errorf("init command %q: want sh /scripts/wait-for-shards.sh", wait.Command)
	}
	script, _ := os.ReadFile("wait-for-shards.sh")
	if n.scripts.Data["wait-for-shards.sh"] != string(script) {
		t.Errorf("ConfigMap %s does not hold wait-for-shards.sh", n.scripts.Name)
	}
	mounted := false
	for _, vm := range wait.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == vm.Name && vm.MountPath == "/scripts" && v.ConfigMap != nil && v.ConfigMap.Name == n.scripts.Name {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("the init container does not mount ConfigMap %s at /scripts", n.scripts.Name)
	}
	// It waits as long as a shard may run, and the merge Job outlives the wait.
	waitS := -1
	for _, e := range wait.Env {
		if e.Name == "WAIT_SECONDS" {
			waitS, _ = strconv.Atoi(e.Value)
		}
	}
	if sd := n.shards.Spec.ActiveDeadlineSeconds; sd == nil || int64(waitS) < *sd {
		t.Errorf("WAIT_SECONDS %d: want at least the shard Job's activeDeadlineSeconds %v", waitS, deref(sd))
	}
	if md := j.Spec.ActiveDeadlineSeconds; md == nil || *md <= int64(waitS) {
		t.Errorf("merge activeDeadlineSeconds %v: want more than WAIT_SECONDS %d", deref(md), waitS)
	}
	// Both containers read the run's ConfigMap, the one the shards read.
	for _, c := range []corev1.Container{wait, merge} {
		has := false
		for _, ef := range c.EnvFrom {
			has = has || (ef.ConfigMapRef != nil && ef.ConfigMapRef.Name == n.params.Name)
		}
		if !has {
			t.Errorf("container %s: no envFrom ConfigMap %s (RUN_ID, SHARDS)", c.Name, n.params.Name)
		}
		checkVarRefs(t, c, cms)
		if !mountsClaim(pod, c, "/results", n.claim.Name) {
			t.Errorf("container %s does not mount claim %s at /results", c.Name, n.claim.Name)
		}
		if _, gpu := c.Resources.Limits["nvidia.com/gpu"]; gpu {
			t.Errorf("container %s asks for a GPU: merging needs none", c.Name)
		}
	}
	line := strings.Join(append(append([]string{}, merge.Command...), merge.Args...), " ")
	if !strings.Contains(line, "abtest merge --out ") || !strings.Contains(line, `"/results/$RUN_ID"/shard-*`) {
		t.Errorf("merge command %q: want abtest merge --out DIR \"/results/$RUN_ID\"/shard-*", line)
	}
	if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 0 {
		t.Errorf("merge backoffLimit %v: want 0 (its exit code is the verdict)", deref(j.Spec.BackoffLimit))
	}
}

func TestRun_OneClaimOneImageOneRunID(t *testing.T) {
	n := render(t)
	if len(n.claim.Spec.AccessModes) != 1 || n.claim.Spec.AccessModes[0] != corev1.ReadWriteMany {
		t.Errorf("claim %s: access modes %v, want [ReadWriteMany] (shards on several nodes at once)", n.claim.Name, n.claim.Spec.AccessModes)
	}
	if want := "-" + n.params.Data["RUN_ID"]; n.kust.NameSuffix != want {
		t.Errorf("kustomization.yaml: nameSuffix %q, RUN_ID %q: set both to the run id", n.kust.NameSuffix, n.params.Data["RUN_ID"])
	}
	// An Indexed Job's pods are named and hostnamed JOB-INDEX: that must be a
	// DNS label, so a long run id fails here rather than at apply.
	shards, _ := strconv.Atoi(n.params.Data["SHARDS"])
	for _, name := range []string{fmt.Sprintf("%s-%d", n.shards.Name, shards-1), n.merge.Name} {
		for _, msg := range validation.IsDNS1123Label(name) {
			t.Errorf("name %q (run id %q): %s", name, n.params.Data["RUN_ID"], msg)
		}
	}
	images := map[string]bool{}
	for _, j := range []*batchv1.Job{n.shards, n.merge} {
		s := j.Spec.Template.Spec
		for _, c := range append(append([]corev1.Container{}, s.InitContainers...), s.Containers...) {
			images[c.Image] = true
		}
	}
	if len(images) != 1 {
		t.Errorf("images %v: want one (the shards and the merge of one build)", images)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// TestWaitForShards_ReturnsWhenAllSettledOrAtTheDeadline runs the init
// container's script against a results folder.
func TestWaitForShards_ReturnsWhenAllSettledOrAtTheDeadline(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	script, _ := filepath.Abs("wait-for-shards.sh")
	write := func(dir string, i, n int) {
		d := filepath.Join(dir, "r1", fmt.Sprintf("shard-%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(d, fmt.Sprintf("nightly-2026-12-01-shard-%dof%d.json", i, n))
		if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(dir string, waitS, settleS int) (string, time.Duration) {
		cmd := exec.Command("sh", script)
		cmd.Env = append(os.Environ(), "RESULTS="+dir, "RUN_ID=r1", "SHARDS=2",
			"WAIT_SECONDS="+strconv.Itoa(waitS), "POLL_SECONDS=1", "SETTLE_SECONDS="+strconv.Itoa(settleS))
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("wait-for-shards.sh: %v\n%s", err, out)
		}
		return string(out), time.Since(start)
	}

	t.Run("all there", func(t *testing.T) {
		dir := t.TempDir()
		write(dir, 0, 2)
		write(dir, 1, 2)
		if out, took := run(dir, 60, 0); !strings.Contains(out, "all 2 shards") || took > 10*time.Second {
			t.Errorf("took %v: %s", took, out)
		}
	})
	t.Run("one comes late", func(t *testing.T) {
		dir := t.TempDir()
		write(dir, 0, 2)
		go func() { time.Sleep(1500 * time.Millisecond); write(dir, 1, 2) }()
		if out, took := run(dir, 60, 0); !strings.Contains(out, "all 2 shards") || took > 20*time.Second {
			t.Errorf("took %v: %s", took, out)
		}
	})
	t.Run("one never comes", func(t *testing.T) {
		dir := t.TempDir()
		write(dir, 0, 2)
		write(dir, 1, 3) // another run's N: not shard 1 of 2
		if out, _ := run(dir, 1, 0); !strings.Contains(out, "shards 1 of r1 have no result") {
			t.Errorf("want shard 1 named missing: %s", out)
		}
	})
	t.Run("still being written", func(t *testing.T) {
		dir := t.TempDir()
		write(dir, 0, 2)
		write(dir, 1, 2)
		if out, _ := run(dir, 0, 3600); !strings.Contains(out, "shards 0 1 of r1 have no result") {
			t.Errorf("want fresh results not counted: %s", out)
		}
	})
}
