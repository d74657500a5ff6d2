// Package apiserver assembles the Kiln API server: scheme, storage of the
// gpu.kiln.dev group, options and the standalone mode.
package apiserver

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverfeatures "k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	"kiln.dev/kiln/pkg/apis/gpu"
	budgetstorage "kiln.dev/kiln/pkg/registry/gpu/budget/storage"
	claimstorage "kiln.dev/kiln/pkg/registry/gpu/claim/storage"
	instancestorage "kiln.dev/kiln/pkg/registry/gpu/instance/storage"
	instancetypestorage "kiln.dev/kiln/pkg/registry/gpu/instancetype/storage"
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
}

// Complete fills in defaults.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{GenericConfig: c.GenericConfig.Complete(), kiln: c.kiln}
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
	storage, err := NewStorage(c.GenericConfig.RESTOptionsGetter)
	if err != nil {
		return nil, err
	}
	groupInfo := genericapiserver.NewDefaultAPIGroupInfo(gpu.GroupName, Scheme, metav1.ParameterCodec, Codecs)
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

// NewStorage returns the storage of every resource of v1alpha1, keyed by
// resource and subresource path.
func NewStorage(optsGetter generic.RESTOptionsGetter) (map[string]rest.Storage, error) {
	instances, err := instancestorage.NewStorage(Scheme, optsGetter)
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
	return map[string]rest.Storage{
		"instances":            instances.Instance,
		"instances/status":     instances.Status,
		"instancetypes":        instanceTypes.InstanceType,
		"instancetypes/status": instanceTypes.Status,
		"claims":               claims.Claim,
		"claims/status":        claims.Status,
		"budgets":              budgets.Budget,
		"budgets/status":       budgets.Status,
	}, nil
}
