package deviceplugin

import "k8s.io/apimachinery/pkg/api/resource"

// Usage is what a device is doing at a sample: how busy its engines were
// over the backend's sample period, and the memory in use on it.
type Usage struct {
	// Utilization is a percentage, 0 to 100.
	Utilization int32 `json:"utilization"`
	// MemoryUsed is the device memory in use.
	MemoryUsed resource.Quantity `json:"memoryUsed,omitempty"`
}

// Sampler is a Backend that can say what its devices are doing.
type Sampler interface {
	// Sample is the usage of each device it can read, by UUID.
	Sample() (map[string]Usage, error)
}
