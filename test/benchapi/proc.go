package benchapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ,
// 100 on every Linux this runs on).
const clockTick = 10 * time.Millisecond

// CPUTime is the user plus system CPU time a process has spent so far.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(string(b))
}

// parseStat reads utime and stime (fields 14 and 15) of a /proc/PID/stat
// line; the command name, field 2, may hold spaces, so fields are counted
// from its closing parenthesis.
func parseStat(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat line %q", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), so utime is f[11] and stime f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed stat line %q", s)
	}
	u, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, err
	}
	st, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, err
	}
	return time.Duration(u+st) * clockTick, nil
}

// RSS is a process's resident set size in bytes.
func RSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// HeapInUse forces a garbage collection in a Go server (the heap profile
// endpoint does one first with gc=1), keeps the profile in profileFile if
// it is set, and reads go_memstats_heap_inuse_bytes from its /metrics.
func HeapInUse(ctx context.Context, client *http.Client, base, profileFile string) (int64, error) {
	prof, err := get(ctx, client, base+"/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, err
	}
	if profileFile != "" {
		if err := os.WriteFile(profileFile, prof, 0o644); err != nil {
			return 0, err
		}
	}
	metrics, err := get(ctx, client, base+"/metrics")
	if err != nil {
		return 0, err
	}
	return metricValue(string(metrics), "go_memstats_heap_inuse_bytes")
}

func metricValue(text, name string) (int64, error) {
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("no %s in /metrics", name)
}

// CPUProfile keeps in file a CPU profile of the Go server at base, taken
// over the next seconds.
func CPUProfile(ctx context.Context, client *http.Client, base string, seconds int, file string) error {
	prof, err := get(ctx, client, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, seconds))
	if err != nil {
		return err
	}
	return os.WriteFile(file, prof, 0o644)
}

func get(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	return getAccept(ctx, client, url, "")
}

func getAccept(ctx context.Context, client *http.Client, url, accept string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return b, nil
}
