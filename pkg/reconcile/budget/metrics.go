package budget

import (
	"sync"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
)

// Each Budget's limits and use, per key, as kiln-apiserver's /metrics
// reports them (that endpoint asks the authorizer; the labels name
// tenants' namespaces). They are read from the Budget informer at each
// scrape.
var (
	budgetLabels = []string{"namespace", "budget", "resource"}
	usedDesc     = metrics.NewDesc("kiln_budget_used",
		"What the namespace's Instances and Claims hold of a key of the Budget (status.used): cards for accelerators keys, the quantity of the key for others.",
		budgetLabels, nil, metrics.ALPHA, "")
	hardDesc = metrics.NewDesc("kiln_budget_hard",
		"The Budget's limit of a key (spec.hard).",
		budgetLabels, nil, metrics.ALPHA, "")
	consumedDesc = metrics.NewDesc("kiln_budget_consumed_card_seconds",
		"What an accelerator-hours key of the Budget has consumed this period (status.consumed), in card-seconds, as last counted.",
		budgetLabels, nil, metrics.ALPHA, "")
	cardHoursDesc = metrics.NewDesc("kiln_budget_card_seconds",
		"The card-seconds the Budget counts this period of one InstanceType (status.usage), and of them those held idle, as last counted.",
		[]string{"namespace", "budget", "instance_type", "state"}, nil, metrics.ALPHA, "")
)

// budgetMetrics is the one collector of the process, registered once; it
// reports the Budgets of the last Reconciler that serves them.
var (
	budgetMetrics  = &collector{}
	registerBudget sync.Once
)

type collector struct {
	metrics.BaseStableCollector
	mu      sync.Mutex
	budgets listers.BudgetLister
}

// ServeMetrics makes the process's legacy registry, which kiln-apiserver
// serves at /metrics, report the Budgets this Reconciler sees.
func (r *Reconciler) ServeMetrics() {
	registerBudget.Do(func() { legacyregistry.CustomMustRegister(budgetMetrics) })
	budgetMetrics.mu.Lock()
	defer budgetMetrics.mu.Unlock()
	budgetMetrics.budgets = r.budgets
}

func (c *collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- usedDesc
	ch <- hardDesc
	ch <- consumedDesc
	ch <- cardHoursDesc
}

func (c *collector) CollectWithStability(ch chan<- metrics.Metric) {
	c.mu.Lock()
	budgets := c.budgets
	c.mu.Unlock()
	if budgets == nil {
		return
	}
	list, err := budgets.List(labels.Everything())
	if err != nil {
		return
	}
	for _, b := range list {
		for key, q := range b.Spec.Hard {
			ch <- metrics.NewLazyConstMetric(hardDesc, metrics.GaugeValue, q.AsApproximateFloat64(), b.Namespace, b.Name, string(key))
			if used, ok := b.Status.Used[key]; ok {
				ch <- metrics.NewLazyConstMetric(usedDesc, metrics.GaugeValue, used.AsApproximateFloat64(), b.Namespace, b.Name, string(key))
			}
			if consumed, ok := b.Status.Consumed[key]; ok {
				ch <- metrics.NewLazyConstMetric(consumedDesc, metrics.GaugeValue, consumed.AsApproximateFloat64()*3600, b.Namespace, b.Name, string(key))
			}
		}
		for _, u := range b.Status.Usage {
			ch <- metrics.NewLazyConstMetric(cardHoursDesc, metrics.GaugeValue, u.CardSeconds.AsApproximateFloat64(), b.Namespace, b.Name, u.InstanceType, "held")
			ch <- metrics.NewLazyConstMetric(cardHoursDesc, metrics.GaugeValue, u.IdleCardSeconds.AsApproximateFloat64(), b.Namespace, b.Name, u.InstanceType, "idle")
		}
	}
}
