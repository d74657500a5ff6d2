package benchapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// Server is a server process whose CPU and memory are reported.
type Server struct {
	// Name is the process name: kube-apiserver, kiln-apiserver or etcd.
	Name string
	PID  int
	// Client and Base reach its /metrics and /debug/pprof; none for etcd.
	Client *http.Client
	Base   string
}

// Config is what one run measures.
type Config struct {
	// Paths are measured in turn, interleaved; the first is the baseline
	// the ratios are to (the CRD).
	Paths   []*Path
	Servers []Server
	Scheme  *runtime.Scheme
	// Sizes are the object counts the workloads run at, ascending.
	Sizes []int
	// Ops is the number of operations of each per-object workload at each
	// size; Lists the number of each LIST.
	Ops, Lists int
	// Workers are the parallel clients of each path.
	Workers int
	// Chunks splits every workload so the paths take turns.
	Chunks int
	// Watchers are the watcher counts measured through the paths named in
	// WatchPaths.
	Watchers   []int
	WatchPaths []string
	// EtcdPut measures raw etcd puts of an object's size; nil skips it.
	EtcdPut func(ctx context.Context, n, workers, size int) (Sample, error)
	// ProfileDir receives heap profiles, and CPU profiles of the servers
	// while each workload named in CPUProfiles runs (for CPUProfileSeconds
	// from its start, at the first size it runs at).
	ProfileDir        string
	CPUProfiles       []string
	CPUProfileSeconds int
	Log               io.Writer
}

// Row is one workload at one size, by path name.
type Row struct {
	Workload string
	Objects  int
	Samples  map[string]Sample
}

// MemRow is a server's memory with a number of objects stored.
type MemRow struct {
	Server    string
	Objects   int
	HeapInUse int64
	RSS       int64
}

// WatchRow is one watch measurement.
type WatchRow struct {
	Path string
	WatchResult
}

// Report is everything one run measured.
type Report struct {
	Paths    []string
	Encoding map[string]Encoding
	Rows     []Row
	Memory   []MemRow
	// Stored is how many Instances each server held at the second memory
	// reading, across all paths that store in it.
	Stored  map[string]int
	Watches []WatchRow
	Etcd    *Sample
	// EtcdWorkers are the parallel clients of the raw etcd puts.
	EtcdWorkers int
	// ObjectBytes is the size of one object as JSON.
	ObjectBytes int
	// Admission is BenchmarkAdmissionChain's result, if it was run.
	Admission []AdmissionRow
	Took      time.Duration
}

// Run measures every workload on every path.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	start := time.Now()
	r := &Report{Encoding: map[string]Encoding{}, Stored: map[string]int{}}
	for _, p := range cfg.Paths {
		r.Paths = append(r.Paths, p.Name)
		r.Encoding[p.Name] = p.Encoding
	}
	sample, err := json.Marshal(Object(CRDGroup, 0))
	if err != nil {
		return nil, err
	}
	r.ObjectBytes = len(sample)
	logf := func(format string, args ...any) {
		fmt.Fprintf(cfg.Log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	if cfg.EtcdPut != nil {
		logf("raw etcd puts")
		s, err := cfg.EtcdPut(ctx, cfg.Sizes[len(cfg.Sizes)-1], cfg.Workers, r.ObjectBytes)
		if err != nil {
			return nil, fmt.Errorf("etcd put: %w", err)
		}
		r.Etcd, r.EtcdWorkers = &s, cfg.Workers
	}
	b := &bench{cfg: cfg, decoder: serializer.NewCodecFactory(cfg.Scheme).UniversalDeserializer(), protobuf: protobuf.NewSerializer(cfg.Scheme, cfg.Scheme)}
	mem, err := b.memory(ctx, 0, "")
	if err != nil {
		return nil, err
	}
	r.Memory = append(r.Memory, mem...)

	created := 0
	for _, size := range cfg.Sizes {
		logf("create %d → %d on each path", created, size)
		row, err := b.interleave(ctx, "create", size, span(created, size, 1), b.create)
		if err != nil {
			return nil, err
		}
		r.Rows = append(r.Rows, row)
		created = size
		if size == cfg.Sizes[len(cfg.Sizes)-1] {
			for _, p := range cfg.Paths {
				server := "kube-apiserver"
				if p.Group != CRDGroup {
					server = "kiln-apiserver"
				}
				r.Stored[server] += size
			}
			mem, err := b.memory(ctx, size, cfg.ProfileDir)
			if err != nil {
				return nil, err
			}
			r.Memory = append(r.Memory, mem...)
		}
		// Spread the operations over every object there is.
		stride := max(1, size/cfg.Ops)
		for _, w := range []struct {
			name  string
			build func(p *Path, i, size int) (Op, error)
			// Updates are conditional: CRDs refuse an update without a
			// resourceVersion, so each is sent with the object's current one.
			conditional bool
		}{
			{"get", b.get, false},
			{"update", b.update, true},
			{"update status", b.updateStatus, true},
			{"patch (merge)", b.mergePatch, false},
			{"patch (apply)", b.apply, false},
		} {
			logf("%s at %d", w.name, size)
			b.conditional = w.conditional
			row, err := b.interleave(ctx, w.name, size, span(0, min(size, cfg.Ops*stride), stride), func(p *Path, i int) (Op, error) { return w.build(p, i, size) })
			if err != nil {
				return nil, err
			}
			r.Rows = append(r.Rows, row)
		}
		for _, l := range []struct {
			name, query string
			paginate    bool
		}{
			{"LIST", "", false},
			{"LIST by 500", "limit=500", true},
			{"LIST shard=3 (labels)", "labelSelector=" + url.QueryEscape("shard=3"), false},
			{"LIST spec.type (fields)", "fieldSelector=" + url.QueryEscape("spec.type="+AltTypeName), false},
		} {
			logf("%s at %d", l.name, size)
			lists := make([]int, cfg.Lists)
			row, err := b.interleaveWith(ctx, l.name, size, lists, 1, func(p *Path, _ int) (Op, error) { return b.list(p, l.query, l.paginate), nil })
			if err != nil {
				return nil, err
			}
			r.Rows = append(r.Rows, row)
		}
	}
	for _, n := range cfg.Watchers {
		for _, p := range cfg.Paths {
			if !slices.Contains(cfg.WatchPaths, p.Name) {
				continue
			}
			logf("%d watchers through %s", n, p.Name)
			w, err := Watch(ctx, p, Name(1), n, 20, 200*time.Millisecond)
			if err != nil {
				return nil, fmt.Errorf("watch %s: %w", p.Name, err)
			}
			r.Watches = append(r.Watches, WatchRow{Path: p.Name, WatchResult: w})
		}
	}
	logf("delete %d on each path", created)
	row, err := b.interleave(ctx, "delete", created, span(0, created, 1), b.delete)
	if err != nil {
		return nil, err
	}
	r.Rows = append(r.Rows, row)
	r.Took = time.Since(start)
	return r, nil
}

// span is from, from+stride, ... below to.
func span(from, to, stride int) []int {
	var s []int
	for i := from; i < to; i += stride {
		s = append(s, i)
	}
	return s
}

type bench struct {
	cfg      Config
	decoder  runtime.Decoder
	protobuf runtime.Encoder
	// conditional says the workload's operations carry the objects'
	// resourceVersions, read into rvs (by path, then name) before the
	// clock starts on each chunk.
	conditional bool
	rvs         map[string]map[string]string
}

// interleave runs a workload over the objects idx on every path with the
// configured workers.
func (b *bench) interleave(ctx context.Context, name string, objects int, idx []int, build func(p *Path, i int) (Op, error)) (Row, error) {
	return b.interleaveWith(ctx, name, objects, idx, b.cfg.Workers, build)
}

// interleaveWith splits idx into chunks and lets every path run each chunk
// in turn, the order rotating, so drift of the machine hits each path
// alike. Operations are built before the clock starts.
func (b *bench) interleaveWith(ctx context.Context, name string, objects int, idx []int, workers int, build func(p *Path, i int) (Op, error)) (Row, error) {
	row := Row{Workload: name, Objects: objects, Samples: map[string]Sample{}}
	if i := slices.Index(b.cfg.CPUProfiles, name); i >= 0 && b.cfg.ProfileDir != "" {
		// Once: the first size this workload runs at.
		b.cfg.CPUProfiles = slices.Delete(slices.Clone(b.cfg.CPUProfiles), i, i+1)
		profiled := b.cpuProfiles(ctx, name)
		defer func() { <-profiled }()
	}
	chunks := min(b.cfg.Chunks, len(idx))
	for c := range chunks {
		part := idx[c*len(idx)/chunks : (c+1)*len(idx)/chunks]
		for k := range b.cfg.Paths {
			p := b.cfg.Paths[(c+k)%len(b.cfg.Paths)]
			if b.conditional {
				if err := b.readRVs(ctx, p); err != nil {
					return row, err
				}
			}
			ops := make([]Op, len(part))
			for j, i := range part {
				op, err := build(p, i)
				if err != nil {
					return row, fmt.Errorf("%s %s: %w", name, p.Name, err)
				}
				ops[j] = op
			}
			before, err := b.cpu()
			if err != nil {
				return row, err
			}
			s := Do(ctx, workers, ops)
			after, err := b.cpu()
			if err != nil {
				return row, err
			}
			s.CPU = map[string]time.Duration{}
			for k, v := range after {
				s.CPU[k] = v - before[k]
			}
			acc := row.Samples[p.Name]
			acc.add(s)
			row.Samples[p.Name] = acc
		}
	}
	for _, p := range b.cfg.Paths {
		if s := row.Samples[p.Name]; s.Errors > 0 {
			return row, fmt.Errorf("%s at %d through %s: %d of %d failed, first: %s", name, objects, p.Name, s.Errors, s.Ops, s.FirstError)
		}
	}
	return row, nil
}

// cpuProfiles records a CPU profile of every Go server, in the
// background, into ProfileDir; the channel closes when they are written.
func (b *bench) cpuProfiles(ctx context.Context, workload string) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range b.cfg.Servers {
		if s.Client == nil {
			continue
		}
		wg.Go(func() {
			file := filepath.Join(b.cfg.ProfileDir, fmt.Sprintf("%s.%s.cpu.pprof", s.Name, strings.ReplaceAll(workload, " ", "-")))
			if err := CPUProfile(ctx, s.Client, s.Base, b.cfg.CPUProfileSeconds, file); err != nil {
				fmt.Fprintf(b.cfg.Log, "CPU profile of %s: %v\n", s.Name, err)
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	return done
}

// readRVs lists p's Instances and keeps their resourceVersions.
func (b *bench) readRVs(ctx context.Context, p *Path) error {
	body, _, err := b.fetchAccept(ctx, p, p.Collection(), "application/json")
	if err != nil {
		return err
	}
	var l struct {
		Items []struct {
			Metadata struct {
				Name            string `json:"name"`
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return err
	}
	if b.rvs == nil {
		b.rvs = map[string]map[string]string{}
	}
	m := make(map[string]string, len(l.Items))
	for _, it := range l.Items {
		m[it.Metadata.Name] = it.Metadata.ResourceVersion
	}
	b.rvs[p.Name] = m
	return nil
}

func (b *bench) cpu() (map[string]time.Duration, error) {
	m := map[string]time.Duration{}
	for _, s := range b.cfg.Servers {
		t, err := CPUTime(s.PID)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		m[s.Name] = t
	}
	return m, nil
}

func (b *bench) memory(ctx context.Context, objects int, profileDir string) ([]MemRow, error) {
	var rows []MemRow
	for _, s := range b.cfg.Servers {
		if s.Client == nil {
			continue
		}
		profile := ""
		if profileDir != "" {
			profile = filepath.Join(profileDir, s.Name+".heap.pprof")
		}
		heap, err := HeapInUse(ctx, s.Client, s.Base, profile)
		if err != nil {
			return nil, fmt.Errorf("%s heap: %w", s.Name, err)
		}
		rss, err := RSS(s.PID)
		if err != nil {
			return nil, err
		}
		rows = append(rows, MemRow{Server: s.Name, Objects: objects, HeapInUse: heap, RSS: rss})
	}
	return rows, nil
}

// body encodes obj for p: JSON for the CRD, which has nothing else, and
// p's encoding for Kiln.
func (b *bench) body(p *Path, obj *gpuv1.Instance) ([]byte, string, error) {
	if p.Group == CRDGroup || p.Encoding != Protobuf {
		body, err := json.Marshal(obj)
		return body, string(JSON), err
	}
	var buf bytes.Buffer
	err := b.protobuf.Encode(obj, &buf)
	return buf.Bytes(), string(Protobuf), err
}

func (b *bench) create(p *Path, i int) (Op, error) {
	body, ct, err := b.body(p, Object(p.Group, i))
	if err != nil {
		return nil, err
	}
	return p.Send(Request{Method: http.MethodPost, URL: p.Collection(), ContentType: ct, Body: body}), nil
}

func (b *bench) get(p *Path, i, _ int) (Op, error) {
	return p.Send(Request{Method: http.MethodGet, URL: p.Item(Name(i))}), nil
}

// update replaces the whole object with one whose labels differ at each
// size, at the resourceVersion read before the chunk started.
func (b *bench) update(p *Path, i, size int) (Op, error) {
	obj := Object(p.Group, i)
	obj.Labels["rev"] = fmt.Sprint(size)
	obj.ResourceVersion = b.rvs[p.Name][obj.Name]
	body, ct, err := b.body(p, obj)
	if err != nil {
		return nil, err
	}
	return p.Send(Request{Method: http.MethodPut, URL: p.Item(Name(i)), ContentType: ct, Body: body}), nil
}

func (b *bench) updateStatus(p *Path, i, size int) (Op, error) {
	obj := WithStatus(Object(p.Group, i), size)
	obj.Labels["rev"] = fmt.Sprint(size)
	obj.ResourceVersion = b.rvs[p.Name][obj.Name]
	body, ct, err := b.body(p, obj)
	if err != nil {
		return nil, err
	}
	return p.Send(Request{Method: http.MethodPut, URL: p.Item(Name(i)) + "/status", ContentType: ct, Body: body}), nil
}

func (b *bench) mergePatch(p *Path, i, size int) (Op, error) {
	body := fmt.Sprintf(`{"metadata":{"labels":{"patched":"%d"}}}`, size)
	return p.Send(Request{Method: http.MethodPatch, URL: p.Item(Name(i)), ContentType: "application/merge-patch+json", Body: []byte(body)}), nil
}

func (b *bench) apply(p *Path, i, size int) (Op, error) {
	body := fmt.Sprintf(`{"apiVersion":"%s/v1alpha1","kind":"Instance","metadata":{"name":%q,"labels":{"applied":"%d"}}}`, p.Group, Name(i), size)
	return p.Send(Request{Method: http.MethodPatch, URL: p.Item(Name(i)) + "?fieldManager=bench-apply&force=true", ContentType: "application/apply-patch+yaml", Body: []byte(body)}), nil
}

func (b *bench) delete(p *Path, i int) (Op, error) {
	return p.Send(Request{Method: http.MethodDelete, URL: p.Item(Name(i))}), nil
}

// list is one LIST of p's collection with query; paginated, it follows
// the continue tokens to the last page.
func (b *bench) list(p *Path, query string, paginate bool) Op {
	return func(ctx context.Context) error {
		cont := ""
		for {
			u := p.Collection() + "?" + query
			if cont != "" {
				u += "&continue=" + url.QueryEscape(cont)
			}
			body, ct, err := b.fetch(ctx, p, u)
			if err != nil {
				return err
			}
			if !paginate {
				return nil
			}
			if cont, err = b.continueToken(body, ct); err != nil {
				return err
			}
			if cont == "" {
				return nil
			}
		}
	}
}

func (b *bench) fetch(ctx context.Context, p *Path, u string) ([]byte, string, error) {
	return b.fetchAccept(ctx, p, u, p.Accept())
}

func (b *bench) fetchAccept(ctx context.Context, p *Path, u, accept string) ([]byte, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Accept", accept)
	resp, err := p.Client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("GET %s: %d %.512s", u, resp.StatusCode, body)
	}
	return body, resp.Header.Get("Content-Type"), nil
}

func (b *bench) continueToken(body []byte, contentType string) (string, error) {
	if contentType == string(Protobuf) {
		obj, _, err := b.decoder.Decode(body, nil, &gpuv1.InstanceList{})
		if err != nil {
			return "", err
		}
		return obj.(*gpuv1.InstanceList).Continue, nil
	}
	var l struct {
		Metadata struct {
			Continue string `json:"continue"`
		} `json:"metadata"`
	}
	err := json.Unmarshal(body, &l)
	return l.Metadata.Continue, err
}
