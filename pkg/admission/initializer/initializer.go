// Package initializer hands Kiln's admission plugins what they read and
// write: informers and a client of Kiln's own API, over the server's
// loopback connection.
package initializer

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	informers "kiln.dev/kiln/pkg/generated/informers/externalversions"
)

// WantsKilnInformerFactory is implemented by plugins that read InstanceTypes
// or Budgets from informers. The server's informers keep only the identity
// of Instances and Claims (name, namespace, uid, resourceVersion,
// generation): read those through the client.
type WantsKilnInformerFactory interface {
	SetKilnInformerFactory(informers.SharedInformerFactory)
	admission.InitializationValidator
}

// WantsKilnClient is implemented by plugins that write Kiln objects or read
// past an informer's lag.
type WantsKilnClient interface {
	SetKilnClient(versioned.Interface)
	admission.InitializationValidator
}

// BudgetRecount recomputes the status.used of a namespace's Budgets from
// the stored Instances and Claims (the Budget loop's Reconcile).
type BudgetRecount func(ctx context.Context, namespace string) error

// WantsBudgetRecount is implemented by plugins that must count what runs
// before they charge a Budget that has not been counted yet.
type WantsBudgetRecount interface {
	SetBudgetRecount(BudgetRecount)
	admission.InitializationValidator
}

// BudgetLister reads a namespace's Budgets as stored now: a consistent
// read, never an informer's possibly older copy. The Budgets are internal
// ones, which the plugin computes on.
type BudgetLister func(ctx context.Context, namespace string) ([]gpu.Budget, error)

// ClientBudgetLister lists Budgets through client, with no resourceVersion:
// a consistent read.
func ClientBudgetLister(client versioned.Interface) BudgetLister {
	return func(ctx context.Context, namespace string) ([]gpu.Budget, error) {
		list, err := client.GpuV1alpha1().Budgets(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var out gpu.BudgetList
		if err := v1alpha1.Convert_v1alpha1_BudgetList_To_gpu_BudgetList(list, &out, nil); err != nil {
			return nil, err
		}
		return out.Items, nil
	}
}

// WantsBudgetLister is implemented by plugins that must see every Budget
// created before the write they admit.
type WantsBudgetLister interface {
	SetBudgetLister(BudgetLister)
	admission.InitializationValidator
}

// BudgetStatusWriter writes a Budget's status, with the Budget's
// resourceVersion as its precondition, and returns the Budget as stored.
type BudgetStatusWriter func(ctx context.Context, b *gpu.Budget) (*gpu.Budget, error)

// ClientBudgetStatusWriter writes through client, as fieldManager.
func ClientBudgetStatusWriter(client versioned.Interface, fieldManager string) BudgetStatusWriter {
	return func(ctx context.Context, b *gpu.Budget) (*gpu.Budget, error) {
		var in v1alpha1.Budget
		if err := v1alpha1.Convert_gpu_Budget_To_v1alpha1_Budget(b, &in, nil); err != nil {
			return nil, err
		}
		stored, err := client.GpuV1alpha1().Budgets(b.Namespace).UpdateStatus(ctx, &in, metav1.UpdateOptions{FieldManager: fieldManager})
		if err != nil {
			return nil, err
		}
		var out gpu.Budget
		if err := v1alpha1.Convert_v1alpha1_Budget_To_gpu_Budget(stored, &out, nil); err != nil {
			return nil, err
		}
		return &out, nil
	}
}

// WantsBudgetStatusWriter is implemented by plugins that charge Budgets.
type WantsBudgetStatusWriter interface {
	SetBudgetStatusWriter(BudgetStatusWriter)
	admission.InitializationValidator
}

// WantsKilnController is implemented by plugins that do at admission what
// kiln-controller would otherwise do first, and so only where it runs:
// beside a server with a cluster, not a standalone one.
type WantsKilnController interface {
	SetKilnController(runs bool)
}

type pluginInitializer struct {
	client     versioned.Interface
	informers  informers.SharedInformerFactory
	recount    BudgetRecount
	budgets    BudgetLister
	status     BudgetStatusWriter
	controller bool
}

// New returns an initializer for Kiln's plugins. The server starts the
// factory once every plugin has asked for its informers. controller says
// whether kiln-controller runs beside the server (cluster mode).
func New(client versioned.Interface, factory informers.SharedInformerFactory, recount BudgetRecount, budgets BudgetLister, status BudgetStatusWriter, controller bool) admission.PluginInitializer {
	return pluginInitializer{client: client, informers: factory, recount: recount, budgets: budgets, status: status, controller: controller}
}

// Initialize hands a plugin what it wants.
func (i pluginInitializer) Initialize(plugin admission.Interface) {
	if wants, ok := plugin.(WantsKilnInformerFactory); ok {
		wants.SetKilnInformerFactory(i.informers)
	}
	if wants, ok := plugin.(WantsKilnClient); ok {
		wants.SetKilnClient(i.client)
	}
	if wants, ok := plugin.(WantsBudgetRecount); ok {
		wants.SetBudgetRecount(i.recount)
	}
	if wants, ok := plugin.(WantsBudgetLister); ok {
		wants.SetBudgetLister(i.budgets)
	}
	if wants, ok := plugin.(WantsBudgetStatusWriter); ok {
		wants.SetBudgetStatusWriter(i.status)
	}
	if wants, ok := plugin.(WantsKilnController); ok {
		wants.SetKilnController(i.controller)
	}
}
