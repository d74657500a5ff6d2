//go:build integration

package storage

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/install"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// startEtcd runs an embedded etcd for the test on loopback ports the
// kernel picks.
func startEtcd(t *testing.T) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir, cfg.LogLevel = "test", t.TempDir(), "fatal"
	client, peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}, url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ListenMetricsUrls = nil
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatal("embedded etcd not ready after a minute")
	}
	return "http://" + e.Clients[0].Addr().String()
}

// racing is a storage whose first Delete lets a writer in first: the
// moment between the generic store's read of the object and its delete, in
// which kiln-controller adds its finalizer.
type racing struct {
	storage.Interface
	once   sync.Once
	before func(ctx context.Context, s storage.Interface, key string)
}

func (r *racing) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validate storage.ValidateObjectFunc, cached runtime.Object, opts storage.DeleteOptions) error {
	r.once.Do(func() { r.before(ctx, r.Interface, key) })
	return r.Interface.Delete(ctx, key, out, preconditions, validate, cached, opts)
}

type optionsGetter struct {
	url    string
	scheme *runtime.Scheme
	s      *racing
}

func (o optionsGetter) GetRESTOptions(resource schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	scheme := o.scheme
	codec := serializer.NewCodecFactory(scheme).LegacyCodec(v1alpha1.SchemeGroupVersion)
	cfg := storagebackend.NewDefaultConfig("/registry", codec)
	cfg.Transport.ServerList = []string{o.url}
	return generic.RESTOptions{
		StorageConfig:  cfg.ForResource(resource),
		ResourcePrefix: resource.Resource,
		Decorator: func(config *storagebackend.ConfigForResource, prefix string, keyFunc func(runtime.Object) (string, error),
			newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, trigger storage.IndexerFuncs, indexers *cache.Indexers,
		) (storage.Interface, factory.DestroyFunc, error) {
			s, destroy, err := generic.UndecoratedStorage(config, prefix, keyFunc, newFunc, newListFunc, getAttrs, trigger, indexers)
			o.s.Interface = s
			return o.s, destroy, err
		},
	}, nil
}

// TestDeleteKeepsAFinalizerAddedMeanwhile: a tenant's DELETE of a Claim
// kiln-controller has not yet given its finalizer, while the controller
// adds it (and goes on to make the holder Pod). The generic store removes
// the Claim anyway; the Claim storage must keep it, marked for deletion,
// for the controller to finalize.
func TestDeleteKeepsAFinalizerAddedMeanwhile(t *testing.T) {
	etcd := startEtcd(t)
	scheme := runtime.NewScheme()
	install.Install(scheme)
	for _, tc := range []struct {
		name string
		// generic deletes through the generic store, as before the fix:
		// it shows the race is really there.
		generic    bool
		collection bool
		wantKept   bool
	}{
		{name: "the generic store loses the finalizer", generic: true},
		{name: "Delete", wantKept: true},
		{name: "DeleteCollection", collection: true, wantKept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &racing{before: func(ctx context.Context, s storage.Interface, key string) {
				err := s.GuaranteedUpdate(ctx, key, &gpu.Claim{}, false, nil, func(in runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
					c := in.(*gpu.Claim)
					c.Finalizers = append(c.Finalizers, v1alpha1.ClaimFinalizer)
					return c, nil, nil
				}, nil)
				if err != nil {
					t.Errorf("adding the finalizer: %v", err)
				}
			}}
			claims, err := NewStorage(scheme, optionsGetter{url: etcd, scheme: scheme, s: s})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(claims.Claim.Store.DestroyFunc)
			ns := "team-" + map[bool]string{true: "generic", false: "kiln"}[tc.generic] + map[bool]string{true: "-all", false: ""}[tc.collection]
			ctx := genericapirequest.WithNamespace(context.Background(), ns)
			_, err = claims.Claim.Create(ctx, &gpu.Claim{
				ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns},
				Spec:       gpu.ClaimSpec{Type: "h100", Accelerators: new(int32(1))},
			}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.generic:
				_, _, err = claims.Claim.Store.Delete(ctx, "c", rest.ValidateAllObjectFunc, &metav1.DeleteOptions{})
			case tc.collection:
				_, err = claims.Claim.DeleteCollection(ctx, rest.ValidateAllObjectFunc, &metav1.DeleteOptions{}, &metainternalversion.ListOptions{})
			default:
				_, _, err = claims.Claim.Delete(ctx, "c", rest.ValidateAllObjectFunc, &metav1.DeleteOptions{})
			}
			if err != nil {
				t.Fatalf("delete: %v", err)
			}
			obj, err := claims.Claim.Get(ctx, "c", &metav1.GetOptions{})
			switch {
			case !tc.wantKept && apierrors.IsNotFound(err):
				// The race the fix is for.
			case !tc.wantKept:
				t.Fatalf("the generic store kept the Claim (%v, %v): the test no longer races", obj, err)
			case err != nil:
				t.Fatalf("the Claim is gone with the finalizer added meanwhile: %v", err)
			default:
				c := obj.(*gpu.Claim)
				if c.DeletionTimestamp == nil || len(c.Finalizers) != 1 {
					t.Errorf("kept Claim: deletionTimestamp %v finalizers %v, want it marked for deletion with the controller's finalizer", c.DeletionTimestamp, c.Finalizers)
				}
			}
		})
	}
}
