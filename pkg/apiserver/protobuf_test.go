//go:build integration

package apiserver_test

import (
	"bytes"
	"context"
	"io"
	"mime"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/apiserver"
	"kiln.dev/kiln/pkg/apiserver/testserver"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	kilnscheme "kiln.dev/kiln/pkg/generated/clientset/versioned/scheme"
)

// protobufPrefix starts every object Kubernetes encodes as protobuf.
var protobufPrefix = []byte("k8s\x00")

// etcdKey is where the registry keeps an object: the server's prefix,
// then group/resource, as genericoptions' storage factory lays it out.
func etcdKey(resource, ns, name string) string {
	key := apiserver.DefaultEtcdPathPrefix + "/" + gpuv1.GroupName + "/" + resource
	if ns != "" {
		key += "/" + ns
	}
	return key + "/" + name
}

// etcdClient opens the test server's embedded etcd with the client
// certificate the server keeps in its data directory.
func etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	dir := filepath.Join(server.DataDir, "etcd-pki", "client")
	tlsConfig, err := testserver.EtcdTLS(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{server.EtcdURL}, TLS: tlsConfig, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func etcdGet(t *testing.T, c *clientv3.Client, key string) []byte {
	t.Helper()
	resp, err := c.Get(ctx(t), key)
	if err != nil {
		t.Fatalf("etcd get %s: %v", key, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("etcd get %s: %d keys, want 1", key, len(resp.Kvs))
	}
	return resp.Kvs[0].Value
}

// decodeStored decodes protobuf etcd holds and checks it is a v1alpha1
// object of the kind expected.
func decodeStored(t *testing.T, data []byte, gvk schema.GroupVersionKind) runtime.Object {
	t.Helper()
	obj, got, err := protobuf.NewSerializer(apiserver.Scheme, apiserver.Scheme).Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("decoding the stored %s: %v", gvk.Kind, err)
	}
	if *got != gvk {
		t.Fatalf("stored as %v, want %v", *got, gvk)
	}
	return obj
}

// kilnKind is one kind of the group, with an object of it for the test
// to create.
type kilnKind struct {
	kind, resource, namespace, name string
	create                          func(context.Context, versioned.Interface) error
}

// everyKind has one object of each kind, created by the tests in ns.
func everyKind(ns string) []kilnKind {
	return []kilnKind{
		{"InstanceType", "instancetypes", "", ns + "-h100", func(c context.Context, k versioned.Interface) error {
			_, err := k.GpuV1alpha1().InstanceTypes().Create(c, h100(ns+"-h100"), metav1.CreateOptions{})
			return err
		}},
		{"Instance", "instances", ns, "notebook", func(c context.Context, k versioned.Interface) error {
			_, err := k.GpuV1alpha1().Instances(ns).Create(c, instance(ns, "notebook", "h100", 1), metav1.CreateOptions{})
			return err
		}},
		{"Claim", "claims", ns, "hold", func(c context.Context, k versioned.Interface) error {
			_, err := k.GpuV1alpha1().Claims(ns).Create(c, claim(ns, "hold"), metav1.CreateOptions{})
			return err
		}},
		{"Budget", "budgets", ns, "team", func(c context.Context, k versioned.Interface) error {
			_, err := k.GpuV1alpha1().Budgets(ns).Create(c, budget(ns, "team"), metav1.CreateOptions{})
			return err
		}},
		{"NodeDevices", "nodedevices", "", ns + "-node", func(c context.Context, k versioned.Interface) error {
			_, err := k.GpuV1alpha1().NodeDevices().Create(c, &gpuv1.NodeDevices{ObjectMeta: metav1.ObjectMeta{Name: ns + "-node"}}, metav1.CreateOptions{})
			return err
		}},
	}
}

func (k kilnKind) listPath() string {
	path := "/apis/" + gpuv1.SchemeGroupVersion.String()
	if k.namespace != "" {
		path += "/namespaces/" + k.namespace
	}
	return path + "/" + k.resource
}

func (k kilnKind) gvk() schema.GroupVersionKind { return gpuv1.SchemeGroupVersion.WithKind(k.kind) }

// TestStoredJSONStillReads: objects a server before protobuf storage wrote
// as JSON read and update through the API, and the update stores them as
// protobuf.
func TestStoredJSONStillReads(t *testing.T) {
	c, etcd := ctx(t), etcdClient(t)
	ns, name := "proto-legacy", "legacy"

	// What the server stored before: v1alpha1, defaulted, through its JSON
	// storage codec.
	old := instance(ns, name, "h100", 1)
	apiserver.Scheme.Default(old)
	old.UID = types.UID("6b1f4c1e-0000-4000-8000-000000000001")
	old.CreationTimestamp = metav1.NewTime(time.Now().Truncate(time.Second))
	old.Generation = 1
	data, err := runtime.Encode(apiserver.Codecs.LegacyCodec(gpuv1.SchemeGroupVersion), old)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte(`{"kind":"Instance","apiVersion":"gpu.kiln.dev/v1alpha1"`)) {
		t.Fatalf("legacy encoding is not the JSON the old server stored: %.80s", data)
	}
	key := etcdKey("instances", ns, name)
	put, err := etcd.Put(c, key, string(data))
	if err != nil {
		t.Fatal(err)
	}

	insts := client.GpuV1alpha1().Instances(ns)
	got, err := insts.Get(c, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the JSON-stored instance: %v", err)
	}
	if got.UID != old.UID || got.Spec.Image != old.Spec.Image || *got.Spec.Resources.Accelerators != 1 {
		t.Errorf("read back uid %q image %q, want %q %q", got.UID, got.Spec.Image, old.UID, old.Spec.Image)
	}
	if want := strconv.FormatInt(put.Header.Revision, 10); got.ResourceVersion != want {
		t.Errorf("resourceVersion %s, want the etcd revision %s", got.ResourceVersion, want)
	}
	// The watch cache decoded the JSON from etcd's watch too.
	list, err := insts.List(c, metav1.ListOptions{ResourceVersion: got.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil || len(list.Items) != 1 || list.Items[0].UID != old.UID {
		t.Fatalf("list from the watch cache: %v %+v", err, list)
	}

	got.Labels = map[string]string{"migrated": "yes"}
	got.Spec.Image = "python:3.12"
	updated, err := insts.Update(c, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update the JSON-stored instance: %v", err)
	}
	if updated.Spec.Image != "python:3.12" || updated.Labels["migrated"] != "yes" || updated.Generation != 2 {
		t.Errorf("updated image %q labels %v generation %d", updated.Spec.Image, updated.Labels, updated.Generation)
	}
	stored := etcdGet(t, etcd, key)
	if !bytes.HasPrefix(stored, protobufPrefix) {
		t.Fatalf("after an update the instance is stored as %.40q, want protobuf", stored)
	}
	if inst := decodeStored(t, stored, gpuv1.SchemeGroupVersion.WithKind("Instance")).(*gpuv1.Instance); inst.Spec.Image != "python:3.12" || inst.UID != old.UID {
		t.Errorf("stored image %q uid %q", inst.Spec.Image, inst.UID)
	}
}

// TestNewObjectsStoredAsProtobuf: every kind is written to etcd as
// v1alpha1 protobuf.
func TestNewObjectsStoredAsProtobuf(t *testing.T) {
	c, etcd := ctx(t), etcdClient(t)
	for _, k := range everyKind("proto-store") {
		t.Run(k.kind, func(t *testing.T) {
			if err := k.create(c, client); err != nil {
				t.Fatalf("create %s: %v", k.kind, err)
			}
			stored := etcdGet(t, etcd, etcdKey(k.resource, k.namespace, k.name))
			if !bytes.HasPrefix(stored, protobufPrefix) {
				t.Fatalf("%s stored as %.40q, want protobuf", k.kind, stored)
			}
			obj := decodeStored(t, stored, k.gvk())
			if name, _ := meta.NewAccessor().Name(obj); name != k.name {
				t.Errorf("stored %s is named %q, want %q", k.kind, name, k.name)
			}
		})
	}
}

// The Accept headers of the metadata client (the namespace controller's,
// the garbage collector's) for an object and a list, without its JSON
// fallback.
const (
	protobufMetadata     = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
	protobufMetadataList = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
)

// TestProtobufClients: a client that asks for protobuf alone gets it for
// every kind, on get and list, as the full object or as its metadata.
func TestProtobufClients(t *testing.T) {
	c := ctx(t)
	kinds := everyKind("proto-serve")
	for _, k := range kinds {
		if err := k.create(c, client); err != nil {
			t.Fatalf("create %s: %v", k.kind, err)
		}
	}
	metaScheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(metaScheme); err != nil {
		t.Fatal(err)
	}
	metaDecoder := protobuf.NewSerializer(metaScheme, metaScheme)
	objectDecoder := kilnscheme.Codecs.UniversalDeserializer()
	metaGV := schema.GroupVersion{Group: "meta.k8s.io", Version: "v1"}

	for _, k := range kinds {
		for _, tc := range []struct {
			name, path, accept string
			decoder            runtime.Decoder
			wantKind           schema.GroupVersionKind
		}{
			{"get", k.listPath() + "/" + k.name, runtime.ContentTypeProtobuf, objectDecoder, k.gvk()},
			{"list", k.listPath(), runtime.ContentTypeProtobuf, objectDecoder, gpuv1.SchemeGroupVersion.WithKind(k.kind + "List")},
			{"get metadata", k.listPath() + "/" + k.name, protobufMetadata, metaDecoder, metaGV.WithKind("PartialObjectMetadata")},
			{"list metadata", k.listPath(), protobufMetadataList, metaDecoder, metaGV.WithKind("PartialObjectMetadataList")},
		} {
			t.Run(k.kind+"/"+tc.name, func(t *testing.T) {
				resp, body := request(t, http.MethodGet, tc.path, tc.accept)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET %s Accept %s: %d %s", tc.path, tc.accept, resp.StatusCode, body)
				}
				if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != runtime.ContentTypeProtobuf {
					t.Fatalf("Content-Type %q, want %s", resp.Header.Get("Content-Type"), runtime.ContentTypeProtobuf)
				}
				obj, gvk, err := tc.decoder.Decode(body, nil, nil)
				if err != nil {
					t.Fatalf("decoding the protobuf response: %v", err)
				}
				if *gvk != tc.wantKind {
					t.Fatalf("decoded a %v, want %v", *gvk, tc.wantKind)
				}
				checkNames(t, obj, k.name)
			})
		}
	}
}

// checkNames fails t unless obj is named name, or is a list holding it.
func checkNames(t *testing.T, obj runtime.Object, name string) {
	t.Helper()
	if !meta.IsListType(obj) {
		if got, _ := meta.NewAccessor().Name(obj); got != name {
			t.Errorf("got %q, want %q", got, name)
		}
		return
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range items {
		if got, _ := meta.NewAccessor().Name(item); got == name {
			return
		}
	}
	t.Errorf("list of %d items without %q", len(items), name)
}

// TestMetadataClientDeletesCollections: the namespace controller's metadata
// client (protobuf first) lists and deletes every kind of a namespace.
func TestMetadataClientDeletesCollections(t *testing.T) {
	c := ctx(t)
	ns := "proto-nsdelete"
	for _, k := range everyKind(ns) {
		if k.namespace != "" {
			if err := k.create(c, client); err != nil {
				t.Fatalf("create %s: %v", k.kind, err)
			}
		}
	}
	mc, err := metadata.NewForConfig(server.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, resource := range []string{"instances", "claims", "budgets"} {
		t.Run(resource, func(t *testing.T) {
			r := mc.Resource(gpuv1.SchemeGroupVersion.WithResource(resource)).Namespace(ns)
			list, err := r.List(c, metav1.ListOptions{})
			if err != nil || len(list.Items) != 1 {
				t.Fatalf("metadata list: %v, %d items", err, len(list.Items))
			}
			if err := r.DeleteCollection(c, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				t.Fatalf("metadata delete collection: %v", err)
			}
		})
	}
}

// TestProtobufClientset: Kiln's clientset set up as kiln-controller sets it
// up, protobuf both ways, writes, reads and watches every kind.
func TestProtobufClientset(t *testing.T) {
	c := ctx(t)
	cfg := rest.CopyConfig(server.Config)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	pb, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := "proto-clientset"
	w, err := pb.GpuV1alpha1().Instances(ns).Watch(c, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	for _, k := range everyKind(ns) {
		if err := k.create(c, pb); err != nil {
			t.Fatalf("create %s in protobuf: %v", k.kind, err)
		}
	}

	insts := pb.GpuV1alpha1().Instances(ns)
	inst, err := insts.Get(c, "notebook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inst.Spec.Image = "python:3.12"
	if inst, err = insts.Update(c, inst, metav1.UpdateOptions{}); err != nil || inst.Spec.Image != "python:3.12" {
		t.Fatalf("update in protobuf: %v", err)
	}
	inst.Status.Phase = gpuv1.InstancePending
	inst.Status.Message = "waiting for a node"
	if inst, err = insts.UpdateStatus(c, inst, metav1.UpdateOptions{}); err != nil || inst.Status.Message != "waiting for a node" {
		t.Fatalf("update status in protobuf: %v", err)
	}
	if inst, err = insts.Stop(c, "notebook", &gpuv1.Instance{}, metav1.CreateOptions{}); err != nil || !inst.Spec.Stopped {
		t.Fatalf("stop in protobuf: %v", err)
	}
	if list, err := pb.GpuV1alpha1().NodeDevices().List(c, metav1.ListOptions{}); err != nil || len(list.Items) == 0 {
		t.Fatalf("list nodedevices in protobuf: %v", err)
	}

	// The watch saw the create and the three writes, decoded from protobuf.
	events := 0
	timeout := time.After(30 * time.Second)
	for events < 4 {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Error {
				t.Fatalf("watch error: %v", ev.Object)
			}
			if got, ok := ev.Object.(*gpuv1.Instance); !ok || got.Name != "notebook" {
				t.Fatalf("watch event %s of %T", ev.Type, ev.Object)
			}
			events++
		case <-timeout:
			t.Fatalf("watch saw %d events, want 4", events)
		}
	}
}

// request sends a request with the admin's credentials and returns the
// response and its body.
func request(t *testing.T, method, path, accept string) (*http.Response, []byte) {
	t.Helper()
	transport, err := rest.TransportFor(server.Config)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, server.Config.Host+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}
