// Package apiserver assembles the Kiln API server: scheme, storage of the
// gpu.kiln.dev group, options and the standalone mode.
package apiserver

import (
	"fmt"

	apiserverfeatures "k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	restclient "k8s.io/client-go/rest"

	"kiln.dev/kiln/pkg/apis/gpu"
	budgetstorage "kiln.dev/kiln/pkg/registry/gpu/budget/storage"
	claimstorage "kiln.dev/kiln/pkg/registry/gpu/claim/storage"
	instancestorage "kiln.dev/kiln/pkg/registry/gpu/instance/storage"
	instancetypestorage "kiln.dev/kiln/pkg/registry/gpu/instancetype/storage"
	nodedevicesstorage "kiln.dev/kiln/pkg/registry/gpu/nodedevices/storage"
)

// Config is the configuration of a Kiln API server.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	kiln          *kilnClients
}

// CompletedConfig is a Config whose defaults have been filled in.
type CompletedConfig struct {
	GenericConfig genericapiserver.CompletedConfig
	kiln          *kilnClients
	// cluster is the connection to kube-apiserver; nil in standalone mode.
	cluster *restclient.Config
}

// Complete fills in defaults.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{GenericConfig: c.GenericConfig.Complete(), kiln: c.kiln, cluster: c.GenericConfig.ClientConfig}
}

// Server is a running Kiln API server.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// New builds the server and installs the gpu.kiln.dev group.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.GenericConfig.New("kiln-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	pods, err := podsGetter(c.cluster)
	if err != nil {
		return nil, err
	}
	storage, err := NewStorage(c.GenericConfig.RESTOptionsGetter, instancestorage.Options{Pods: pods})
	if err != nil {
		return nil, err
	}
	if c.kiln != nil {
		lister, ok := storage["budgets"].(rest.Lister)
		if !ok {
			return nil, fmt.Errorf("the budgets storage cannot list")
		}
		status, ok := storage["budgets/status"].(rest.Updater)
		if !ok {
			return nil, fmt.Errorf("the budgets/status storage cannot update")
		}
		c.kiln.useBudgetStorage(lister, status)
	}
	// ParameterCodec, not meta/v1's: instances/log decodes its query into
	// InstanceLogOptions of this group.
	groupInfo := genericapiserver.NewDefaultAPIGroupInfo(gpu.GroupName, Scheme, ParameterCodec, Codecs)
	groupInfo.VersionedResourcesStorageMap["v1alpha1"] = storage
	if err := generic.InstallAPIGroup(&groupInfo); err != nil {
		return nil, err
	}
	// /readyz stays false until the watch cache of every resource is
	// initialised, so a new replica takes no traffic it would answer slowly.
	if utilfeature.DefaultFeatureGate.Enabled(apiserverfeatures.WatchCacheInitializationPostStartHook) {
		if err := generic.AddPostStartHook("storage-readiness", generic.StorageReadinessHook.Hook); err != nil {
			return nil, err
		}
	}
	if c.kiln != nil {
		if err := addKilnHooks(generic, c.kiln); err != nil {
			return nil, err
		}
	}
	return &Server{GenericAPIServer: generic}, nil
}

// podsGetter reads Pods and their logs from the cluster, with the server's
// own credentials; nil in standalone mode, which has no cluster.
func podsGetter(cfg *restclient.Config) (corev1client.PodsGetter, error) {
	if cfg == nil {
		return nil, nil
	}
	cfg = restclient.CopyConfig(cfg)
	// Every log request of every tenant goes through this client: client-go's
	// default of 5 QPS would queue them; kube-apiserver's flow control is the
	// limit that matters.
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube client for instance logs: %w", err)
	}
	return client.CoreV1(), nil
}

// NewStorage returns the storage of every resource of v1alpha1, keyed by
// resource and subresource path.
func NewStorage(optsGetter generic.RESTOptionsGetter, instanceOpts instancestorage.Options) (map[string]rest.Storage, error) {
	optsGetter = clientErrorsOptions{optsGetter}
	instances, err := instancestorage.NewStorage(Scheme, optsGetter, instanceOpts)
	if err != nil {
		return nil, fmt.Errorf("instances storage: %w", err)
	}
	instanceTypes, err := instancetypestorage.NewStorage(Scheme, optsGetter)
	if err != nil {
		return nil, fmt.Errorf("instancetypes storage: %w", err)
	}
	claims, err := claimstorage.NewStorage(Scheme, optsGetter)
	if err != nil {
		return nil, fmt.Errorf("claims storage: %w", err)
	}
	budgets, err := budgetstorage.NewStorage(Scheme, optsGetter)
	if err != nil {
		return nil, fmt.Errorf("budgets storage: %w", err)
	}
	nodeDevices, err := nodedevicesstorage.NewStorage(Scheme, optsGetter)
	if err != nil {
		return nil, fmt.Errorf("nodedevices storage: %w", err)
	}
	return map[string]rest.Storage{
		"instances":            instances.Instance,
		"instances/status":     instances.Status,
		"instances/start":      instances.Start,
		"instances/stop":       instances.Stop,
		"instances/log":        instances.Log,
		"instancetypes":        instanceTypes.InstanceType,
		"instancetypes/status": instanceTypes.Status,
		"claims":               claims.Claim,
		"claims/status":        claims.Status,
		"budgets":              budgets.Budget,
		"budgets/status":       budgets.Status,
		"nodedevices":          nodeDevices.NodeDevices,
		"nodedevices/status":   nodeDevices.Status,
	}, nil
}
