package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// hostileRequest is one request of the corpus; path is relative to the
// namespace's instances collection.
type hostileRequest struct {
	name, method, path, contentType, body string
	header                                map[string]string
	// inMessage, if set, must be in the Status message of the refusal.
	inMessage string
	// coreBody, if set, is the same request for a ConfigMap: a 5xx from
	// Kiln is k8s.io/apiserver's own doing, and not failed, only if
	// kube-apiserver answers its own ConfigMap with a 5xx too.
	coreBody string
}

// hostileCorpus is what a tenant with edit might send to break Kiln.
func hostileCorpus() []hostileRequest {
	instance := func(spec string) string {
		return `{"apiVersion":"gpu.kiln.dev/v1alpha1","kind":"Instance","metadata":{"generateName":"h-"},"spec":` + spec + `}`
	}
	const json, merge, jsonPatch, strategic, apply = "application/json", "application/merge-patch+json",
		"application/json-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml"
	deep := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
	many := make([]string, 5000)
	for i := range many {
		many[i] = "p" + strconv.Itoa(i) + "=x"
	}
	reqs := []hostileRequest{
		{name: "body past the request limit", method: "POST", contentType: json,
			body: instance(`{"type":"cpu","image":"` + strings.Repeat("x", 4<<20) + `"}`)},
		{name: "name of 1 MiB in the body", method: "POST", contentType: json,
			body: strings.Replace(instance(`{"type":"cpu","image":"i","resources":{"accelerators":0}}`), `"generateName":"h-"`, `"name":"`+strings.Repeat("a", 1<<20)+`"`, 1), inMessage: "metadata.name"},
		{name: "nesting 20,000 deep", method: "POST", contentType: json, body: instance(deep)},
		{name: "invalid UTF-8 in the name", method: "POST", contentType: json,
			body: strings.Replace(instance(`{"type":"cpu","image":"i","resources":{"accelerators":0}}`), `"generateName":"h-"`, "\"name\":\"n\xff\xfeo\"", 1)},
		{name: "a confusable name (Cyrillic o)", method: "POST", contentType: json,
			body: strings.Replace(instance(`{"type":"cpu","image":"i","resources":{"accelerators":0}}`), `"generateName":"h-"`, `"name":"n`+"\u043e"+`tebook"`, 1), inMessage: "metadata.name"},
		{name: "duplicate keys, strict", method: "POST", path: "?fieldValidation=Strict", contentType: json,
			body: instance(`{"type":"cpu","type":"h100","image":"i","resources":{"accelerators":0}}`), inMessage: "spec.type"},
		{name: "unknown field, strict", method: "POST", path: "?fieldValidation=Strict", contentType: json,
			body: instance(`{"type":"cpu","image":"i","gpus":8,"resources":{"accelerators":0}}`), inMessage: "spec.gpus"},
		{name: "resourceVersion that is no number", method: "PUT", path: "/target", contentType: json,
			body: strings.Replace(instance(`{"type":"cpu","image":"i","resources":{"accelerators":0}}`), `"generateName":"h-"`, `"name":"target","resourceVersion":"abc"`, 1)},
		{name: "malformed merge patch", method: "PATCH", path: "/target", contentType: merge, body: `{"spec":`},
		{name: "merge patch of null metadata", method: "PATCH", path: "/target", contentType: merge, body: `{"metadata":null,"spec":null}`},
		{name: "JSON patch with a bogus op", method: "PATCH", path: "/target", contentType: jsonPatch, body: `[{"op":"bogus","path":"/spec"}]`},
		{name: "JSON patch into a missing path", method: "PATCH", path: "/target", contentType: jsonPatch, body: `[{"op":"replace","path":"/spec/nothing/deeper","value":1}]`},
		{name: "JSON patch removing the spec", method: "PATCH", path: "/target", contentType: jsonPatch, body: `[{"op":"remove","path":"/spec"}]`, inMessage: "spec."},
		{name: "JSON patch of 10,000 ops", method: "PATCH", path: "/target", contentType: jsonPatch,
			body: "[" + strings.TrimSuffix(strings.Repeat(`{"op":"add","path":"/metadata/labels/x","value":"y"},`, 10000), ",") + "]"},
		{name: "JSON patch that is an object", method: "PATCH", path: "/target", contentType: jsonPatch, body: `{"op":"add"}`},
		{name: "strategic patch with a bogus directive", method: "PATCH", path: "/target", contentType: strategic, body: `{"spec":{"$patch":"explode","ports":[{"$patch":"delete"}]}}`,
			coreBody: `{"data":{"$patch":"explode"}}`},
		{name: "apply without a field manager", method: "PATCH", path: "/target", contentType: apply,
			body: "apiVersion: gpu.kiln.dev/v1alpha1\nkind: Instance\nmetadata: {name: target}\n", inMessage: "fieldManager"},
		{name: "apply by a bogus manager of 10,000 bytes", method: "PATCH", path: "/target?fieldManager=" + strings.Repeat("m", 10000), contentType: apply,
			body: "apiVersion: gpu.kiln.dev/v1alpha1\nkind: Instance\nmetadata: {name: target}\n"},
		{name: "apply of another object's name", method: "PATCH", path: "/target?fieldManager=x", contentType: apply,
			body: "apiVersion: gpu.kiln.dev/v1alpha1\nkind: Instance\nmetadata: {name: other}\n"},
		{name: "apply of YAML that is not an object", method: "PATCH", path: "/target?fieldManager=x", contentType: apply, body: "- a\n- b\n"},
		{name: "Connection: Upgrade on a list", method: "GET", header: map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, inMessage: "Upgrade"},
		{name: "Connection: Upgrade on a get", method: "GET", path: "/target", header: map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}, inMessage: "Upgrade"},
		{name: "double slashes", method: "GET", path: "//target"},
		{name: "dot-dot out of the group", method: "GET", path: "/../../../../../api/v1/namespaces/kube-system/secrets"},
		{name: "encoded dot-dot", method: "GET", path: "/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/api/v1/secrets"},
		{name: "5,000 query parameters", method: "GET", path: "?" + strings.Join(many, "&")},
		{name: "a label selector that does not parse", method: "GET", path: "?labelSelector=a+in+(b", inMessage: "unable to parse"},
		{name: "a field selector on an unknown field", method: "GET", path: "?fieldSelector=spec.gpus%3D8", inMessage: "spec.gpus"},
		{name: "watch with a bogus resourceVersion", method: "GET", path: "?watch=1&resourceVersion=abc&timeoutSeconds=1", inMessage: "resourceVersion"},
		{name: "list with a bogus resourceVersion", method: "GET", path: "?resourceVersion=abc&resourceVersionMatch=NotOlderThan", inMessage: "resourceVersion"},
		{name: "log of a stopped Instance, bogus tail", method: "GET", path: "/target/log?tailLines=-5&limitBytes=0"},
		{name: "start with a body of the wrong kind", method: "POST", path: "/target/start", contentType: json, body: `{"kind":"Pod","apiVersion":"v1"}`},
	}
	// Wrong types in every field of the spec.
	for _, f := range []struct{ field, value string }{
		{"type", "8"}, {"image", "[]"}, {"command", `"ls"`}, {"args", "{}"}, {"env", `"X=1"`}, {"resources", `"8"`},
		{"ports", "22"}, {"ssh", "true"}, {"workspace", `"200Gi"`}, {"stopped", `"yes"`}, {"claimName", "{}"},
		{"nodeName", "[1]"}, {"volumes", `{"a":1}`}, {"imagePullPolicy", "1e3"}, {"privileged", `"true"`},
	} {
		reqs = append(reqs, hostileRequest{name: "spec." + f.field + " of the wrong type", method: "POST", contentType: json,
			body: instance(`{"type":"cpu","image":"i","resources":{"accelerators":0},"` + f.field + `":` + f.value + `}`), inMessage: "spec." + f.field})
	}
	return reqs
}

// TestHostileHTTP sends the corpus to Kiln through the aggregator, as
// tenant-a, and directly, as the aggregator would for tenant-a. No
// response may be a 5xx or a redirect; every refusal Kiln writes is a
// Status with a message, naming the field where there is one; the server
// neither crashes nor loses the object the requests aim at, and its peak
// memory is reported.
func TestHostileHTTP(t *testing.T) {
	ns := "e2e-hostile"
	createNamespace(t, ns)
	bindEdit(t, ns)
	mustKubectl(t, tenant(tenantA), strings.Replace(cpuInstance("target", ns, "cpu"), "spec:\n", "spec:\n  stopped: true\n", 1), "create", "-f", "-")
	before := mustKubectl(t, tenant(tenantA), "", "get", "instance", "target", "-n", ns, "-o", "jsonpath={.metadata.uid}/{.spec.type}/{.spec.image}/{.spec.resources}")
	kilnPID, err := cluster.PID("kiln-apiserver")
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := cluster.ConfigFor(tenantA)
	if err != nil {
		t.Fatal(err)
	}
	aggregated, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	paths := []struct {
		name   string
		client *http.Client
		base   string
		header map[string]string
	}{
		{"aggregated", aggregated, cfg.Host, nil},
		{"direct", frontProxyClient(t), cluster.KilnURL,
			map[string]string{"X-Remote-User": tenantA, "X-Remote-Group": "system:authenticated"}},
	}
	// The ConfigMap the core twins of some requests aim at.
	mustKubectl(t, tenant(tenantA), "", "create", "configmap", "target", "-n", ns, "--from-literal=a=b")
	var upstream []string
	for _, p := range paths {
		p.client.Timeout = time.Minute
		p.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		base := p.base + "/apis/gpu.kiln.dev/v1alpha1/namespaces/" + ns + "/instances"
		codes := map[int]int{}
		for _, r := range hostileCorpus() {
			req, err := http.NewRequest(r.method, base+r.path, strings.NewReader(r.body))
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			if r.contentType != "" {
				req.Header.Set("Content-Type", r.contentType)
			}
			for k, v := range p.header {
				req.Header.Set(k, v)
			}
			for k, v := range r.header {
				req.Header.Set(k, v)
			}
			resp, err := p.client.Do(req)
			if err != nil {
				t.Errorf("%s %s: no response: %v", p.name, r.name, err)
				continue
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
			resp.Body.Close()
			codes[resp.StatusCode]++
			switch code := resp.StatusCode; {
			case code >= 500 && r.coreBody != "" && coreFails(t, cfg.Host, ns, r):
				upstream = append(upstream, fmt.Sprintf("%s %s: %d %s", p.name, r.name, code, truncate(body)))
			case code >= 500:
				t.Errorf("%s %s: %d %s", p.name, r.name, code, truncate(body))
			case code >= 300 && code < 400:
				t.Errorf("%s %s: redirect %d to %q", p.name, r.name, code, resp.Header.Get("Location"))
			case code >= 400 && code != http.StatusRequestEntityTooLarge && code != http.StatusRequestHeaderFieldsTooLarge && code != http.StatusRequestURITooLong:
				// Those three Go's HTTP server may answer before Kiln's
				// handlers run; every other refusal is Kiln's Status.
				var st struct{ Kind, Message string }
				if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" || st.Message == "" {
					t.Errorf("%s %s: %d without a Status message: %s", p.name, r.name, code, truncate(body))
				} else if r.inMessage != "" && !strings.Contains(st.Message, r.inMessage) {
					t.Errorf("%s %s: %d %q does not name %s", p.name, r.name, code, st.Message, r.inMessage)
				}
			}
		}
		t.Logf("%s: status codes %v", p.name, codes)
	}

	for _, u := range upstream {
		t.Logf("5xx that kube-apiserver gives its own ConfigMaps too (k8s.io/apiserver's patch handler): %s", u)
	}

	after, err := cluster.PID("kiln-apiserver")
	if err != nil || after != kilnPID {
		t.Fatalf("kiln-apiserver was PID %d and is now %d (%v): it restarted", kilnPID, after, err)
	}
	if got := mustKubectl(t, tenant(tenantA), "", "get", "instance", "target", "-n", ns, "-o", "jsonpath={.metadata.uid}/{.spec.type}/{.spec.image}/{.spec.resources}"); got != before {
		t.Errorf("target changed:\n%s\nwas\n%s", got, before)
	}
	if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", kilnPID)); err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "VmHWM:") || strings.HasPrefix(line, "VmRSS:") {
				t.Logf("kiln-apiserver %s", strings.Join(strings.Fields(line), " "))
			}
		}
	}
}

// coreFails sends r's core twin to kube-apiserver for the ConfigMap
// "target" and says whether it answers with a 5xx as well.
func coreFails(t *testing.T, host, ns string, r hostileRequest) bool {
	t.Helper()
	cfg, err := cluster.ConfigFor(tenantA)
	if err != nil {
		t.Fatal(err)
	}
	core, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(r.method, host+"/api/v1/namespaces/"+ns+"/configmaps/target", strings.NewReader(r.coreBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", r.contentType)
	resp, err := core.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode >= 500
}

// frontProxyClient presents the aggregator's client certificate to Kiln.
func frontProxyClient(t *testing.T) *http.Client {
	t.Helper()
	ca, err := os.ReadFile(cluster.KilnCAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(cluster.FrontProxyClient.CertFile, cluster.FrontProxyClient.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(bytes.ToValidUTF8(b[:300], nil)) + "..."
	}
	return string(b)
}
