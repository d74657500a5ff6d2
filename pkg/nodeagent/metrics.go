package nodeagent

import (
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/metrics"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// The device metrics follow dcgm-exporter where a metric means the same:
// its label names (Hostname, gpu, UUID, modelName, namespace, pod), and
// kiln_device_gpu_utilization is DCGM_FI_DEV_GPU_UTIL (percent of the
// sample period a kernel ran; smoothed here as NodeDevices reports it).
// kiln_device_memory_used_bytes is DCGM_FI_DEV_FB_USED in bytes rather
// than MiB, Prometheus's base unit. They are read from what the agent
// last sampled at each scrape: nothing is stored or written for them.
var (
	deviceLabels = []string{"Hostname", "gpu", "UUID", "modelName", "namespace", "pod", "kiln_instance", "kiln_claim"}

	utilizationDesc = metrics.NewDesc("kiln_device_gpu_utilization",
		"Utilization of the device, in percent, smoothed over recent samples (dcgm-exporter's DCGM_FI_DEV_GPU_UTIL). Absent for a device its backend does not sample.",
		deviceLabels, nil, metrics.ALPHA, "")
	memoryUsedDesc = metrics.NewDesc("kiln_device_memory_used_bytes",
		"Device memory in use, in bytes (dcgm-exporter's DCGM_FI_DEV_FB_USED, which is in MiB). Absent for a device its backend does not sample.",
		deviceLabels, nil, metrics.ALPHA, "")
	lastActiveDesc = metrics.NewDesc("kiln_device_last_active_timestamp_seconds",
		"When the device was last busier than --active-threshold, in seconds since the epoch; absent while it never was.",
		deviceLabels, nil, metrics.ALPHA, "")
	healthyDesc = metrics.NewDesc("kiln_device_healthy",
		"1 while the device is healthy, 0 while it is not (NodeDevices says why).",
		deviceLabels, nil, metrics.ALPHA, "")
)

// MetricsHandler serves the metrics of the node's devices. Their labels
// name the namespace, Pod and Instance or Claim holding each device, so
// serve it where only the monitoring system reaches it.
func (a *Agent) MetricsHandler() http.Handler {
	r := metrics.NewKubeRegistry()
	r.CustomMustRegister(&deviceCollector{a: a})
	return metrics.HandlerFor(r, metrics.HandlerOpts{})
}

type deviceCollector struct {
	metrics.BaseStableCollector
	a *Agent
}

func (c *deviceCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	for _, d := range []*metrics.Desc{utilizationDesc, memoryUsedDesc, lastActiveDesc, healthyDesc} {
		ch <- d
	}
}

func (c *deviceCollector) CollectWithStability(ch chan<- metrics.Metric) {
	a := c.a
	a.mu.Lock()
	holders := map[string]types.UID{}
	for uid, p := range a.allocated {
		for _, d := range p.devices {
			holders[d] = uid
		}
	}
	type sampled struct {
		utilization float64
		memory      float64
		lastActive  float64
	}
	usage := map[string]sampled{}
	if a.activity != nil {
		for uuid, d := range a.activity.devices {
			if !d.sampled {
				continue
			}
			s := sampled{utilization: d.smoothed, memory: float64(d.usage.MemoryUsed.Value())}
			if !d.lastActive.IsZero() {
				s.lastActive = float64(d.lastActive.UnixNano()) / 1e9
			}
			usage[uuid] = s
		}
	}
	a.mu.Unlock()
	pods := map[types.UID]*corev1.Pod{}
	if a.pods != nil {
		if list, err := a.pods.List(labels.Everything()); err == nil {
			for _, p := range list {
				pods[p.UID] = p
			}
		}
	}
	for _, d := range a.Manager.Devices() {
		var ns, pod, inst, claim string
		if uid, ok := holders[d.UUID]; ok {
			if p := pods[uid]; p != nil {
				ns, pod = p.Namespace, p.Name
				if ref := metav1.GetControllerOf(p); ref != nil && ref.APIVersion == v1alpha1.SchemeGroupVersion.String() {
					switch ref.Kind {
					case "Instance":
						inst = ref.Name
					case "Claim":
						claim = ref.Name
					}
				}
			}
		}
		values := []string{a.Node, strconv.Itoa(d.Index), d.UUID, d.Model, ns, pod, inst, claim}
		healthy := 0.0
		if d.Healthy() {
			healthy = 1
		}
		ch <- metrics.NewLazyConstMetric(healthyDesc, metrics.GaugeValue, healthy, values...)
		s, ok := usage[d.UUID]
		if !ok {
			continue
		}
		ch <- metrics.NewLazyConstMetric(utilizationDesc, metrics.GaugeValue, s.utilization, values...)
		ch <- metrics.NewLazyConstMetric(memoryUsedDesc, metrics.GaugeValue, s.memory, values...)
		if s.lastActive > 0 {
			ch <- metrics.NewLazyConstMetric(lastActiveDesc, metrics.GaugeValue, s.lastActive, values...)
		}
	}
}
