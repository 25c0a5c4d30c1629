// Package k8s holds the Kubernetes manifests for sharded clock sweeps and
// explorations; this test strictly decodes them with the real API types
// and checks that they agree with each other (shard count, index
// variable, shared results claim).
package k8s

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	claimName   = "themis-sweep-results"
	resultsPath = "/results"
	kvmResource = corev1.ResourceName("devices.kubevirt.io/kvm")
)

// docs splits a YAML stream on "---" lines and drops documents that hold
// only comments or whitespace.
func docs(t *testing.T, file string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	var cur bytes.Buffer
	flush := func() {
		meaningful := false
		for _, l := range strings.Split(cur.String(), "\n") {
			if s := strings.TrimSpace(l); s != "" && !strings.HasPrefix(s, "#") {
				meaningful = true
				break
			}
		}
		if meaningful {
			out = append(out, append([]byte(nil), cur.Bytes()...))
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimRight(line, " \t") == "---" || strings.HasPrefix(line, "--- ") {
			flush()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	flush()
	return out
}

// decodeStrict decodes every document of file into a fresh T, rejecting
// unknown or duplicate fields, and checks apiVersion/kind.
func decodeStrict[T any](t *testing.T, file, apiVersion, kind string, meta func(*T) (string, string)) []*T {
	t.Helper()
	var objs []*T
	for i, d := range docs(t, file) {
		obj := new(T)
		if err := yaml.UnmarshalStrict(d, obj); err != nil {
			t.Fatalf("%s: document %d: strict decode: %v", file, i, err)
		}
		if av, k := meta(obj); av != apiVersion || k != kind {
			t.Fatalf("%s: document %d: got %s %s, want %s %s", file, i, av, k, apiVersion, kind)
		}
		objs = append(objs, obj)
	}
	if len(objs) == 0 {
		t.Fatalf("%s: no documents", file)
	}
	return objs
}

func jobs(t *testing.T, file string) []*batchv1.Job {
	return decodeStrict(t, file, "batch/v1", "Job", func(j *batchv1.Job) (string, string) { return j.APIVersion, j.Kind })
}

func oneJob(t *testing.T, file string) *batchv1.Job {
	t.Helper()
	js := jobs(t, file)
	if len(js) != 1 {
		t.Fatalf("%s: %d Jobs, want 1", file, len(js))
	}
	return js[0]
}

func oneContainer(t *testing.T, j *batchv1.Job) corev1.Container {
	t.Helper()
	cs := j.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("job %s: %d containers, want 1", j.Name, len(cs))
	}
	return cs[0]
}

// script returns the shell script of an `sh -c SCRIPT` container.
func script(t *testing.T, c corev1.Container) string {
	t.Helper()
	cmd := append(append([]string(nil), c.Command...), c.Args...)
	if len(cmd) != 3 || cmd[0] != "sh" || cmd[1] != "-c" {
		t.Fatalf("container %s: command %q, want sh -c SCRIPT", c.Name, cmd)
	}
	return cmd[2]
}

// resultsClaim checks that the Job mounts the results claim at /results.
func resultsClaim(t *testing.T, j *batchv1.Job, c corev1.Container) {
	t.Helper()
	var vol string
	for _, v := range j.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claimName {
			if v.PersistentVolumeClaim.ReadOnly {
				t.Errorf("job %s: results claim mounted read-only", j.Name)
			}
			vol = v.Name
		}
	}
	if vol == "" {
		t.Fatalf("job %s: no volume for claim %s", j.Name, claimName)
	}
	for _, m := range c.VolumeMounts {
		if m.Name == vol {
			if m.MountPath != resultsPath {
				t.Errorf("job %s: claim mounted at %s, want %s", j.Name, m.MountPath, resultsPath)
			}
			return
		}
	}
	t.Errorf("job %s: container %s does not mount volume %s", j.Name, c.Name, vol)
}

var (
	shardRE      = regexp.MustCompile(`--shard "\$JOB_COMPLETION_INDEX/([0-9]+)"`)
	mergeCountRE = regexp.MustCompile(`\[ "\$n" -ne ([0-9]+) \]`)
)

func sweepShards(t *testing.T, s string) int {
	t.Helper()
	m := shardRE.FindAllStringSubmatch(s, -1)
	if len(m) != 1 {
		t.Fatalf("sweep script: want exactly one --shard \"$JOB_COMPLETION_INDEX/N\", got %d in %q", len(m), s)
	}
	n, _ := strconv.Atoi(m[0][1])
	return n
}

func TestPVC(t *testing.T) {
	pvcs := decodeStrict(t, "pvc.yaml", "v1", "PersistentVolumeClaim",
		func(p *corev1.PersistentVolumeClaim) (string, string) { return p.APIVersion, p.Kind })
	if len(pvcs) != 1 || pvcs[0].Name != claimName {
		t.Fatalf("pvc.yaml: want one claim %s", claimName)
	}
	p := pvcs[0]
	rwx := false
	for _, m := range p.Spec.AccessModes {
		rwx = rwx || m == corev1.ReadWriteMany
	}
	if !rwx {
		t.Errorf("claim %s: access modes %v; shards on different nodes need ReadWriteMany", claimName, p.Spec.AccessModes)
	}
	if q, ok := p.Spec.Resources.Requests[corev1.ResourceStorage]; !ok || q.IsZero() {
		t.Errorf("claim %s: no storage request", claimName)
	}
}

// batch is one sharded Job and its merge Job.
type batch struct {
	name, job, merge string
	// jobWants and mergeWants must appear in the scripts; lanes are the
	// env vars the Job's container sets.
	jobWants, mergeWants, env []string
	// shard is the file pod i writes; run is what the stand-in themisctl
	// prints for pod i of n (its argv); mergeRun for the merge of files;
	// merged the merge's output file.
	shard    func(i int) string
	run      func(i, n int) string
	mergeRun func(files []string) string
	merged   string
}

var batches = []batch{
	{
		name: "sweep", job: "sweep-job.yaml", merge: "sweep-merge-job.yaml",
		jobWants:   []string{"themisctl --json sweep clock", `--fs "$LANES"`, "JOB_COMPLETION_INDEX", "/results/shard-$JOB_COMPLETION_INDEX.jsonl", "set -eu"},
		mergeWants: []string{"themisctl sweep merge /results/shard-*.jsonl --json", "/results/merged.jsonl", "set -eu"},
		env:        []string{"LANES"},
		shard:      func(i int) string { return "shard-" + strconv.Itoa(i) + ".jsonl" },
		run: func(i, n int) string {
			return "--json sweep clock --fs ext2,ext4 --shard " + strconv.Itoa(i) + "/" + strconv.Itoa(n)
		},
		mergeRun: func(files []string) string { return "sweep merge " + strings.Join(files, " ") + " --json" },
		merged:   "merged.jsonl",
	},
	{
		name: "explore", job: "explore-job.yaml", merge: "explore-merge-job.yaml",
		jobWants: []string{"themisctl --json explore", `--fs "$LANES"`, `--depth "$DEPTH"`, `--seed "$SEED"`, `--workers "$WORKERS"`, "JOB_COMPLETION_INDEX",
			"/results/explore-shard-$JOB_COMPLETION_INDEX.json", "set -eu"},
		mergeWants: []string{"themisctl --json explore merge /results/explore-shard-*.json", "/results/explore-merged.json", "set -eu"},
		env:        []string{"LANES", "DEPTH", "SEED", "WORKERS"},
		shard:      func(i int) string { return "explore-shard-" + strconv.Itoa(i) + ".json" },
		run: func(i, n int) string {
			return "--json explore --fs ext2,ext4 --depth 3 --seed 7 --workers 2 --shard " + strconv.Itoa(i) + "/" + strconv.Itoa(n)
		},
		mergeRun: func(files []string) string { return "--json explore merge " + strings.Join(files, " ") },
		merged:   "explore-merged.json",
	},
}

func TestShardJobs(t *testing.T) {
	for _, b := range batches {
		t.Run(b.name, func(t *testing.T) { checkShardJob(t, b) })
	}
}

// checkShardJob checks an Indexed Job: its shard count agrees with its
// completions and parallelism, its script has what it needs, it asks for
// KVM on a labelled node and mounts the results claim.
func checkShardJob(t *testing.T, b batch) {
	j := oneJob(t, b.job)
	s := j.Spec
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion {
		t.Fatalf("completionMode %v, want Indexed", s.CompletionMode)
	}
	if s.Completions == nil || s.Parallelism == nil {
		t.Fatal("completions and parallelism must be set")
	}
	c := oneContainer(t, j)
	sc := script(t, c)
	n := sweepShards(t, sc)
	if n < 1 || int(*s.Completions) != n || int(*s.Parallelism) != n {
		t.Errorf("completions %d, parallelism %d, shards in command %d: must be equal", *s.Completions, *s.Parallelism, n)
	}
	for _, want := range b.jobWants {
		if !strings.Contains(sc, want) {
			t.Errorf("%s script lacks %q: %q", b.name, want, sc)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for _, name := range b.env {
		if env[name] == "" {
			t.Errorf("env %s not set", name)
		}
	}
	if w := env["WORKERS"]; w != "" {
		if cpu := c.Resources.Requests.Cpu(); strconv.Itoa(int(cpu.Value())) != w {
			t.Errorf("WORKERS %s, but the pod requests %s CPUs: one guest per CPU asked for", w, cpu)
		}
	}
	ps := j.Spec.Template.Spec
	if ps.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never (backoffLimitPerIndex needs it)", ps.RestartPolicy)
	}
	if ps.NodeSelector["themis.dev/kvm"] != "true" {
		t.Errorf("nodeSelector %v lacks themis.dev/kvm=true", ps.NodeSelector)
	}
	if q, ok := c.Resources.Limits[kvmResource]; !ok || q.Value() != 1 {
		t.Errorf("container %s: limits %v lack %s: 1", c.Name, c.Resources.Limits, kvmResource)
	}
	resultsClaim(t, j, c)
}

func TestMergeJobs(t *testing.T) {
	for _, b := range batches {
		t.Run(b.name, func(t *testing.T) { checkMergeJob(t, b) })
	}
}

// checkMergeJob checks a merge Job against its sharded Job.
func checkMergeJob(t *testing.T, b batch) {
	sharded := oneJob(t, b.job)
	n := sweepShards(t, script(t, oneContainer(t, sharded)))
	j := oneJob(t, b.merge)
	if j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion {
		t.Error("merge job must not be Indexed")
	}
	if j.Name == sharded.Name {
		t.Errorf("merge and sharded jobs share the name %s", j.Name)
	}
	c := oneContainer(t, j)
	sc := script(t, c)
	for _, want := range b.mergeWants {
		if !strings.Contains(sc, want) {
			t.Errorf("merge script lacks %q: %q", want, sc)
		}
	}
	m := mergeCountRE.FindStringSubmatch(sc)
	if m == nil {
		t.Fatalf("merge script does not check the shard count: %q", sc)
	}
	if got, _ := strconv.Atoi(m[1]); got != n {
		t.Errorf("merge expects %d shards, %s runs %d", got, b.name, n)
	}
	resultsClaim(t, j, c)
}

// TestJobNames: no two Jobs share a name.
func TestJobNames(t *testing.T) {
	seen := map[string]string{}
	for _, b := range batches {
		for _, f := range []string{b.job, b.merge} {
			j := oneJob(t, f)
			if seen[j.Name] != "" {
				t.Errorf("%s and %s both name a Job %s", seen[j.Name], f, j.Name)
			}
			seen[j.Name] = f
		}
	}
}

// TestStrictRejectsTypos makes sure the decoder would catch a misspelt field.
func TestStrictRejectsTypos(t *testing.T) {
	d := docs(t, "sweep-job.yaml")[0]
	bad := bytes.Replace(d, []byte("completionMode:"), []byte("completionsMode:"), 1)
	if bytes.Equal(bad, d) {
		t.Fatal("completionMode not found")
	}
	var j batchv1.Job
	if err := yaml.UnmarshalStrict(bad, &j); err == nil {
		t.Fatal("strict decode accepted an unknown field")
	}
}

// TestScripts runs each batch's two shell scripts with a stand-in
// themisctl and /results pointed at a temporary directory: every index
// writes its shard, a failing shard leaves no shard file, and the merge
// sees all shards.
func TestScripts(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	for _, b := range batches {
		t.Run(b.name, func(t *testing.T) { runScripts(t, b) })
	}
}

func runScripts(t *testing.T, b batch) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	res := filepath.Join(dir, "results")
	for _, d := range []string{bin, res} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fake := "#!/bin/sh\nif [ -n \"${FAIL:-}\" ]; then echo partial; exit 1; fi\nprintf '%s\\n' \"$*\"\n"
	if err := os.WriteFile(filepath.Join(bin, "themisctl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"LANES=ext2,ext4", "DEPTH=3", "SEED=7", "WORKERS=2"}
	run := func(sc string, extra ...string) ([]byte, error) {
		cmd := exec.Command("sh", "-c", strings.ReplaceAll(sc, resultsPath, res))
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		cmd.Env = append(append(cmd.Env, env...), extra...)
		return cmd.CombinedOutput()
	}
	sc := script(t, oneContainer(t, oneJob(t, b.job)))
	n := sweepShards(t, sc)
	merge := script(t, oneContainer(t, oneJob(t, b.merge)))

	if out, err := run(merge); err == nil {
		t.Fatalf("merge with no shards succeeded: %s", out)
	}
	if out, err := run(sc, "JOB_COMPLETION_INDEX=0", "FAIL=1"); err == nil {
		t.Fatalf("failing shard reported success: %s", out)
	}
	if _, err := os.Stat(filepath.Join(res, b.shard(0))); !os.IsNotExist(err) {
		t.Fatalf("failing shard left a shard file (stat: %v)", err)
	}
	var want []string
	for i := 0; i < n; i++ {
		if out, err := run(sc, "JOB_COMPLETION_INDEX="+strconv.Itoa(i)); err != nil {
			t.Fatalf("shard %d: %v: %s", i, err, out)
		}
		bs, err := os.ReadFile(filepath.Join(res, b.shard(i)))
		if err != nil {
			t.Fatal(err)
		}
		if got, w := strings.TrimSpace(string(bs)), b.run(i, n); got != w {
			t.Errorf("shard %d ran themisctl %q, want %q", i, got, w)
		}
		want = append(want, filepath.Join(res, b.shard(i)))
	}
	if out, err := run(merge); err != nil {
		t.Fatalf("merge: %v: %s", err, out)
	}
	bs, err := os.ReadFile(filepath.Join(res, b.merged))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(want)
	if got, w := strings.TrimSpace(string(bs)), b.mergeRun(want); got != w {
		t.Errorf("merge ran themisctl %q, want %q", got, w)
	}
	left, _ := filepath.Glob(filepath.Join(res, "*.tmp"))
	if len(left) != 0 {
		// The failed try's shard file was replaced by the retry's.
		t.Errorf("temporary files left: %v", left)
	}
}
