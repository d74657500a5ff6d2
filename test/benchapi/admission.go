package benchapi

import (
	"bufio"
	"strconv"
	"strings"
	"time"
)

// AdmissionRow is one sub-benchmark of BenchmarkAdmissionChain (Kiln's
// admission chain in-process, pkg/apiserver), as `go test -bench` printed it.
type AdmissionRow struct {
	Name          string
	NsPerOp       float64
	P50, P99      time.Duration
	AllocsPerOp   float64
	BytesPerOp    float64
	Iterations    int
	GOMAXPROCSTag string
}

// ParseAdmission reads the BenchmarkAdmissionChain lines of `go test
// -bench` output: name, iterations, then value-unit pairs.
func ParseAdmission(out string) []AdmissionRow {
	var rows []AdmissionRow
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkAdmissionChain/") {
			continue
		}
		name := strings.TrimPrefix(f[0], "BenchmarkAdmissionChain/")
		r := AdmissionRow{Name: name}
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			r.Name, r.GOMAXPROCSTag = name[:i], name[i+1:]
		}
		r.Iterations, _ = strconv.Atoi(f[1])
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				r.NsPerOp = v
			case "p50-ns":
				r.P50 = time.Duration(v)
			case "p99-ns":
				r.P99 = time.Duration(v)
			case "B/op":
				r.BytesPerOp = v
			case "allocs/op":
				r.AllocsPerOp = v
			}
		}
		rows = append(rows, r)
	}
	return rows
}
