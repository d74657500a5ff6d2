package apiserver

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"k8s.io/apiserver/pkg/admission"
	genericinit "k8s.io/apiserver/pkg/admission/initializer"
	admissionmetrics "k8s.io/apiserver/pkg/admission/metrics"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	kubeinformers "k8s.io/client-go/informers"
	restclient "k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"kiln.dev/kiln/pkg/admission/budget"
	"kiln.dev/kiln/pkg/admission/claimattach"
	kilninit "kiln.dev/kiln/pkg/admission/initializer"
	"kiln.dev/kiln/pkg/admission/instanceprivilege"
	"kiln.dev/kiln/pkg/admission/instancesizing"
	"kiln.dev/kiln/pkg/admission/instancetypeaccess"
	"kiln.dev/kiln/pkg/admission/instancetypepool"
	"kiln.dev/kiln/pkg/admission/kilnfinalizers"
	"kiln.dev/kiln/pkg/admission/nodedevicesowner"
	"kiln.dev/kiln/pkg/admission/quantitybounds"
	"kiln.dev/kiln/pkg/admission/resourceversionformat"
	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	informers "kiln.dev/kiln/pkg/generated/informers/externalversions"
	budgetloop "kiln.dev/kiln/pkg/reconcile/budget"
)

// KilnPlugins are Kiln's admission plugins in chain order.
// ResourceVersionFormat and QuantityBounds come first, so the registry
// never parses a mangled resourceVersion nor compares a runaway quantity
// before they are refused; the mutating ones run before the standard mutating plugins, so
// webhooks see sized Instances; Budget runs last, so nothing refuses a
// write after it is charged.
var KilnPlugins = []string{
	resourceversionformat.PluginName,
	quantitybounds.PluginName,
	instancesizing.PluginName,
	instancetypeaccess.PluginName,
	instancetypepool.PluginName,
	instanceprivilege.PluginName,
	kilnfinalizers.PluginName,
	nodedevicesowner.PluginName,
	claimattach.PluginName,
	budget.PluginName,
}

func registerKilnPlugins(plugins *admission.Plugins) {
	resourceversionformat.Register(plugins)
	quantitybounds.Register(plugins)
	instancesizing.Register(plugins)
	instancetypeaccess.Register(plugins)
	instancetypepool.Register(plugins)
	instanceprivilege.Register(plugins)
	kilnfinalizers.Register(plugins)
	nodedevicesowner.Register(plugins)
	claimattach.Register(plugins)
	budget.Register(plugins)
}

// alwaysOn are the plugins --disable-admission-plugins may not name, each
// with what would break without it. ResourceVersionFormat and
// QuantityBounds refuse hostile input before the registry touches it, and
// no validating phase or registry strategy could take their place: the
// registry parses the resourceVersion and compares the specs before it
// validates. Budget is Kiln's promise itself. Off, they buy an operator
// nothing and cost every tenant a 500, a server CPU held for hours, or the
// budgets, so a flag naming one is refused at startup rather than obeyed.
var alwaysOn = []struct{ name, without string }{
	{resourceversionformat.PluginName, "a malformed metadata.resourceVersion would get a 500 from the registry instead of a 422"},
	{quantitybounds.PluginName, "one quantity such as 1e2020020020 would hold a CPU of the server for hours"},
	{budget.PluginName, "a namespace could start Instances and Claims beyond its Budgets"},
}

// validateAdmission refuses --disable-admission-plugins naming a plugin of
// alwaysOn.
func validateAdmission(a *genericoptions.AdmissionOptions) []error {
	if a == nil {
		return nil
	}
	var errs []error
	for _, p := range alwaysOn {
		if slices.Contains(a.DisablePlugins, p.name) {
			errs = append(errs, fmt.Errorf("--disable-admission-plugins=%s: %s cannot be disabled, since without it %s; remove it from the flag",
				strings.Join(a.DisablePlugins, ","), p.name, p.without))
		}
	}
	return errs
}

// configureAdmission places Kiln's plugins in the standard chain of
// cluster mode: NamespaceLifecycle first, then Kiln's, then the
// admission-policy and webhook plugins, with Budget at the very end.
func configureAdmission(a *genericoptions.AdmissionOptions) {
	registerKilnPlugins(a.Plugins)
	order := []string{lifecycle.PluginName}
	order = append(order, KilnPlugins[:len(KilnPlugins)-1]...)
	for _, p := range a.RecommendedPluginOrder {
		if p != lifecycle.PluginName {
			order = append(order, p)
		}
	}
	a.RecommendedPluginOrder = append(order, budget.PluginName)
}

// kilnClients are what Kiln's plugins and the budget reconciler read and
// write through: the server's loopback connection to itself.
type kilnClients struct {
	client    versioned.Interface
	informers informers.SharedInformerFactory
	budgets   *budgetloop.Reconciler
	// cluster: the server has a cluster, and kiln-controller runs beside
	// it; false in standalone mode.
	cluster bool
	// budgetStorage and budgetStatus are the registry's Budget storage
	// and its /status, once New has built them.
	budgetStorage atomic.Pointer[rest.Lister]
	budgetStatus  atomic.Pointer[rest.Updater]
}

// newKilnClients connects to the server itself; kube is the cluster's
// informers, nil in standalone mode.
func newKilnClients(loopback *restclient.Config, kube kubeinformers.SharedInformerFactory) (*kilnClients, error) {
	if loopback == nil {
		return nil, fmt.Errorf("no loopback client configuration")
	}
	cfg := restclient.CopyConfig(loopback)
	// Admission charges Budgets under load: do not queue behind a client
	// rate limit of our own.
	cfg.QPS, cfg.Burst = -1, -1
	// The Budget loop's informers decode every write of every Instance and
	// Claim, and each charge is a status update: protobuf, not JSON.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	// The informers' watch-list streams are gzipped event by event when
	// the client accepts it: 3% of the server's CPU in a burst of creates
	// (bench-api's profile: perFlushGzipWriter on one end, gzipReader on
	// the other), for bytes that never leave the process.
	cfg.DisableCompression = true
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(slimObject))
	budgets, err := budgetloop.NewReconciler(client, factory, kube)
	if err != nil {
		return nil, err
	}
	budgets.ServeMetrics()
	return &kilnClients{client: client, informers: factory, budgets: budgets, cluster: kube != nil}, nil
}

// slimObject is the informers' transform. The Budget loop watches
// Instances and Claims only to learn which namespace to recount (the
// recount lists them with a consistent read), so those informers keep
// each object's identity alone (and its deletion and finalizers, for the
// ledger) rather than a second copy of every Instance beside the watch
// cache. Other objects lose their managedFields,
// which nothing here reads; an update sent from such a copy leaves the
// stored ones be.
func slimObject(obj any) (any, error) {
	switch o := obj.(type) {
	case *v1alpha1.Instance:
		return &v1alpha1.Instance{ObjectMeta: identity(o.ObjectMeta)}, nil
	case *v1alpha1.Claim:
		return &v1alpha1.Claim{ObjectMeta: identity(o.ObjectMeta)}, nil
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// identity keeps, beside who the object is, what says its ledger is due
// to be folded: its deletion and its finalizers.
func identity(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion, Generation: m.Generation,
		DeletionTimestamp: m.DeletionTimestamp, Finalizers: m.Finalizers}
}

func (k *kilnClients) initializer() admission.PluginInitializer {
	return kilninit.New(k.client, k.informers, func(ctx context.Context, ns string) error {
		_, err := k.budgets.Reconcile(ctx, ns)
		return err
	}, k.listBudgets, k.writeBudgetStatus, k.cluster)
}

// useBudgetStorage makes the Budget plugin read Budgets from the registry
// and write their status to it in-process.
func (k *kilnClients) useBudgetStorage(l rest.Lister, status rest.Updater) {
	k.budgetStorage.Store(&l)
	k.budgetStatus.Store(&status)
}

// listBudgets reads a namespace's Budgets for the Budget plugin, on every
// write it charges. From the registry it is one quorum read of etcd
// (Budgets have no watch cache; with one, a consistent LIST waits for the
// cache to catch up), as consistent as a LIST through the loopback
// connection but without a second request through the whole handler chain
// and its JSON. Before the registry exists, through the loopback client.
func (k *kilnClients) listBudgets(ctx context.Context, ns string) ([]gpu.Budget, error) {
	l := k.budgetStorage.Load()
	if l == nil {
		return kilninit.ClientBudgetLister(k.client)(ctx, ns)
	}
	obj, err := (*l).List(genericapirequest.WithNamespace(ctx, ns), &metainternalversion.ListOptions{})
	if err != nil {
		return nil, err
	}
	list, ok := obj.(*gpu.BudgetList)
	if !ok {
		return nil, fmt.Errorf("the Budget storage listed a %T", obj)
	}
	return list.Items, nil
}

// writeBudgetStatus writes a charge into a Budget's status for the Budget
// plugin. Every create, start and resize that spends cards is such a
// write. Through the loopback connection each went through the whole
// handler chain, its protobuf both ways, and the field manager, which
// walks status.pending whole: under a burst of creates in one namespace
// these writes were a quarter of kiln-apiserver's CPU (bench-scale,
// step 4). To the registry they are the same guaranteed update of etcd,
// with the resourceVersion read as its precondition and the status
// strategy's validation. They leave managedFields as they were and are
// not in the audit log; the request that caused them is. Before the
// registry exists, through the loopback client.
func (k *kilnClients) writeBudgetStatus(ctx context.Context, b *gpu.Budget) (*gpu.Budget, error) {
	u := k.budgetStatus.Load()
	if u == nil {
		return kilninit.ClientBudgetStatusWriter(k.client, budget.FieldManager)(ctx, b)
	}
	// The write's own request info, not the admitted request's: the
	// store names the resource in its errors from it.
	ctx = genericapirequest.WithRequestInfo(genericapirequest.WithNamespace(ctx, b.Namespace), &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: "update", APIGroup: gpu.GroupName, APIVersion: v1alpha1.SchemeGroupVersion.Version,
		Namespace: b.Namespace, Resource: "budgets", Subresource: "status", Name: b.Name,
	})
	obj, _, err := (*u).Update(ctx, b.Name, rest.DefaultUpdatedObjectInfo(b),
		rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	stored, ok := obj.(*gpu.Budget)
	if !ok {
		return nil, fmt.Errorf("the Budget status storage returned a %T", obj)
	}
	return stored, nil
}

// standaloneAdmission is the chain of standalone mode: Kiln's plugins
// alone, since there is no cluster for NamespaceLifecycle or webhooks.
func standaloneAdmission(c *genericapiserver.RecommendedConfig, k *kilnClients) (admission.Interface, error) {
	plugins := admission.NewPlugins()
	registerKilnPlugins(plugins)
	initializers := admission.PluginInitializers{
		genericinit.New(nil, nil, nil, c.Authorization.Authorizer, c.FeatureGate, c.EffectiveVersion, c.DrainedNotify(), nil),
		k.initializer(),
	}
	return plugins.NewFromPlugins(KilnPlugins, noConfig{}, initializers,
		admission.Decorators{admission.DecoratorFunc(admissionmetrics.WithControllerMetrics)})
}

type noConfig struct{}

func (noConfig) ConfigFor(string) (io.Reader, error) { return nil, nil }

// addKilnHooks starts the informers the plugins registered and the budget
// reconciler once the server serves.
func addKilnHooks(s *genericapiserver.GenericAPIServer, k *kilnClients) error {
	r := k.budgets
	return s.AddPostStartHook("kiln-admission-informers", func(hc genericapiserver.PostStartHookContext) error {
		k.informers.Start(hc.Done())
		go func() {
			if err := r.Run(hc, 2); err != nil && hc.Err() == nil {
				klog.FromContext(hc).Error(err, "Budget reconciler stopped")
			}
		}()
		return nil
	})
}
