package benchapi

import (
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
		err  bool
	}{
		{line: "42 (kube-apiserver) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0 100 0 0", want: 3250 * time.Millisecond},
		{line: "7 (a ) b) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 0 0", want: 70 * time.Millisecond},
		{line: "7 kiln S 1", err: true},
		{line: "7 (kiln) S 1 2 3", err: true},
	} {
		got, err := parseStat(tc.line)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseStat(%q) = %v, %v; want %v, error %v", tc.line, got, err, tc.want, tc.err)
		}
	}
}

func TestReplaceSection(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
		err             bool
	}{
		{name: "appended", doc: "# B\n\ntext\n", want: "# B\n\ntext\n\n" + beginMarker + "\nnew\n" + endMarker + "\n"},
		{name: "replaced", doc: "a\n" + beginMarker + "\nold\n" + endMarker + "\nz\n", want: "a\n" + beginMarker + "\nnew\n" + endMarker + "\nz\n"},
		{name: "out of order", doc: endMarker + "\n" + beginMarker, err: true},
		{name: "end only", doc: "a\n" + endMarker, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := replaceSection([]byte(tc.doc), []byte("\nnew\n\n"))
			if (err != nil) != tc.err || string(got) != tc.want {
				t.Errorf("got %q, %v; want %q, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestSample(t *testing.T) {
	s := Sample{Ops: 4, Elapsed: 2 * time.Second, Latencies: []time.Duration{4, 1, 3, 2},
		CPU: map[string]time.Duration{"etcd": 200 * time.Millisecond}}
	if got := s.Throughput(); got != 2 {
		t.Errorf("Throughput = %v, want 2", got)
	}
	if got := s.Percentile(50); got != 2 {
		t.Errorf("p50 = %v, want 2", got)
	}
	if got := s.Percentile(100); got != 4 {
		t.Errorf("p100 = %v, want 4", got)
	}
	if got := s.CPUPer1000("etcd"); got != 50 {
		t.Errorf("CPU per 1000 = %v, want 50", got)
	}
	for n, want := range map[int]string{999: "999", 1000: "1,000", 1234567: "1,234,567"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestToBenchCRD(t *testing.T) {
	crd, err := ToBenchCRD([]byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: instances.gpu.kiln.dev
spec:
  group: gpu.kiln.dev
  names: {kind: Instance, plural: instances}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if crd.GetName() != "instances."+CRDGroup {
		t.Errorf("name %q", crd.GetName())
	}
	v := crd.Object["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)
	if _, ok := v["subresources"].(map[string]any)["status"]; !ok {
		t.Error("no status subresource")
	}
	if crd.Object["spec"].(map[string]any)["group"] != CRDGroup {
		t.Error("group not moved")
	}
	if _, err := ToBenchCRD([]byte("kind: ConfigMap\n")); err == nil {
		t.Error("a ConfigMap was taken for a CRD")
	}
}

func TestParseAdmission(t *testing.T) {
	out := `goos: linux
BenchmarkAdmissionChain/no-budget-2         	   98227	     10233 ns/op	      5829 p50-ns	     38918 p99-ns	    9163 B/op	      75 allocs/op
BenchmarkAdmissionChain/budget-2            	   24726	     50164 ns/op	     23785 p50-ns	    155631 p99-ns	   25771 B/op	     148 allocs/op
BenchmarkCreateInstance/budget-2 10 5 ns/op
ok  	kiln.dev/kiln/pkg/apiserver	6.200s`
	rows := ParseAdmission(out)
	if len(rows) != 2 {
		t.Fatalf("got %d rows, want 2: %+v", len(rows), rows)
	}
	want := AdmissionRow{Name: "budget", NsPerOp: 50164, P50: 23785, P99: 155631, BytesPerOp: 25771, AllocsPerOp: 148, Iterations: 24726, GOMAXPROCSTag: "2"}
	if rows[1] != want {
		t.Errorf("row = %+v, want %+v", rows[1], want)
	}
}

func TestCPUTargets(t *testing.T) {
	sample := func(kube, kiln, etcd time.Duration) Sample {
		return Sample{Ops: 1000, Elapsed: time.Second, Latencies: []time.Duration{time.Millisecond},
			CPU: map[string]time.Duration{"kube-apiserver": kube, "kiln-apiserver": kiln, "etcd": etcd}}
	}
	r := &Report{
		Paths:    []string{"crd", "aggregated", "aggregated-json"},
		Encoding: map[string]Encoding{"crd": JSON, "aggregated": Protobuf, "aggregated-json": JSON},
		Rows: []Row{
			// The smaller size is not read.
			{Workload: "create", Objects: 10, Samples: map[string]Sample{
				"crd": sample(time.Second, 0, 0), "aggregated": sample(0, 5*time.Second, 0),
			}},
			{Workload: "create", Objects: 100, Samples: map[string]Sample{
				"crd":             sample(2*time.Second, 0, time.Second),
				"aggregated":      sample(time.Second, time.Second, time.Second),
				"aggregated-json": sample(time.Second, 1500*time.Millisecond, time.Second),
			}},
			{Workload: "get", Objects: 100, Samples: map[string]Sample{
				"crd": sample(time.Second, 0, 0), "aggregated": sample(time.Second, 300*time.Millisecond, 0),
			}},
			{Workload: "LIST", Objects: 100, Samples: map[string]Sample{
				"crd":             {Ops: 1, Latencies: []time.Duration{10 * time.Millisecond}},
				"aggregated":      {Ops: 1, Latencies: []time.Duration{2 * time.Millisecond}},
				"aggregated-json": {Ops: 1, Latencies: []time.Duration{6 * time.Millisecond}},
			}},
		},
	}
	want := []string{
		"CPU per create at 100, against kube-apiserver's 2.000 s / 1k for the CRD: protobuf: Kiln 0.50× (≤ 0.5: met), whole path 1.00× (≤ 1.0: met); " +
			"JSON: Kiln 0.75× (≤ 0.5: **not met**), whole path 1.17× (≤ 1.0: **not met**)",
		"CPU per get at 100, against kube-apiserver's 1.000 s / 1k for the CRD: protobuf: Kiln 0.30× (≤ 0.2: **not met**)",
		// The JSON path's LIST, not the protobuf one's.
		"LIST of 100 as JSON through the aggregator: 6.0 ms against the CRD's 10.0 ms (p50), 0.60× (target ≤ 0.5: **not met**)",
	}
	got := r.cpuTargets()
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}
