package apiserver

import (
	"context"
	"fmt"
	"io"

	"k8s.io/apiserver/pkg/admission"
	genericinit "k8s.io/apiserver/pkg/admission/initializer"
	admissionmetrics "k8s.io/apiserver/pkg/admission/metrics"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"kiln.dev/kiln/pkg/admission/budget"
	"kiln.dev/kiln/pkg/admission/claimattach"
	kilninit "kiln.dev/kiln/pkg/admission/initializer"
	"kiln.dev/kiln/pkg/admission/instanceprivilege"
	"kiln.dev/kiln/pkg/admission/instancesizing"
	"kiln.dev/kiln/pkg/admission/instancetypeaccess"
	"kiln.dev/kiln/pkg/admission/kilnfinalizers"
	"kiln.dev/kiln/pkg/admission/nodedevicesowner"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	informers "kiln.dev/kiln/pkg/generated/informers/externalversions"
	budgetloop "kiln.dev/kiln/pkg/reconcile/budget"
)

// KilnPlugins are Kiln's admission plugins in chain order. The mutating
// one runs before the standard mutating plugins, so webhooks see sized
// Instances; Budget runs last, so nothing refuses a write after it is
// charged.
var KilnPlugins = []string{
	instancesizing.PluginName,
	instancetypeaccess.PluginName,
	instanceprivilege.PluginName,
	kilnfinalizers.PluginName,
	nodedevicesowner.PluginName,
	claimattach.PluginName,
	budget.PluginName,
}

func registerKilnPlugins(plugins *admission.Plugins) {
	instancesizing.Register(plugins)
	instancetypeaccess.Register(plugins)
	instanceprivilege.Register(plugins)
	kilnfinalizers.Register(plugins)
	nodedevicesowner.Register(plugins)
	claimattach.Register(plugins)
	budget.Register(plugins)
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
}

func newKilnClients(loopback *rest.Config) (*kilnClients, error) {
	if loopback == nil {
		return nil, fmt.Errorf("no loopback client configuration")
	}
	cfg := rest.CopyConfig(loopback)
	// Admission charges Budgets under load: do not queue behind a client
	// rate limit of our own.
	cfg.QPS, cfg.Burst = -1, -1
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	budgets, err := budgetloop.NewReconciler(client, factory)
	if err != nil {
		return nil, err
	}
	return &kilnClients{client: client, informers: factory, budgets: budgets}, nil
}

func (k *kilnClients) initializer() admission.PluginInitializer {
	return kilninit.New(k.client, k.informers, func(ctx context.Context, ns string) error {
		_, err := k.budgets.Reconcile(ctx, ns)
		return err
	})
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
