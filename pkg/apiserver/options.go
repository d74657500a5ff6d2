package apiserver

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	basecompatibility "k8s.io/component-base/compatibility"
	baseversion "k8s.io/component-base/version"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	kilnopenapi "kiln.dev/kiln/pkg/generated/openapi"
)

// DefaultEtcdPathPrefix keeps Kiln's objects apart from kube-apiserver's
// when both share one etcd.
const DefaultEtcdPathPrefix = "/registry/gpu.kiln.dev"

// Options are the flags of the Kiln API server.
type Options struct {
	RecommendedOptions *genericoptions.RecommendedOptions
	// ServerRun are the generic server's own flags: in-flight limits,
	// request timeouts, and how it shuts down, which decides what clients
	// see while a replica is replaced.
	ServerRun *genericoptions.ServerRunOptions
	// ComponentGlobalsRegistry holds the effective version and feature
	// gates; ServerRun adds its flags.
	ComponentGlobalsRegistry basecompatibility.ComponentGlobalsRegistry
	// Standalone runs without a cluster. Kiln's admission plugins receive
	// their informers through RecommendedOptions.ExtraAdmissionInitializers.
	Standalone StandaloneOptions
	// MaxLogFollowsPerUser bounds one user's concurrent instances/log
	// follows, which priority and fairness does not count; 0 is no limit.
	MaxLogFollowsPerUser int

	Out io.Writer

	// kiln is what Kiln's admission plugins use; made once the loopback
	// client configuration exists.
	kiln *kilnClients
}

// NewOptions returns the default options of cluster mode.
func NewOptions(out io.Writer) *Options {
	// First: the options below read feature gates.
	registerKubeComponent(compatibility.DefaultComponentGlobalsRegistry)
	o := &Options{
		// Config makes the storage codec, from --storage-media-type.
		RecommendedOptions:       genericoptions.NewRecommendedOptions(DefaultEtcdPathPrefix, nil),
		ComponentGlobalsRegistry: compatibility.DefaultComponentGlobalsRegistry,
		Standalone:               StandaloneOptions{DataDir: "_output/standalone"},
		MaxLogFollowsPerUser:     DefaultMaxLogFollowsPerUser,
		Out:                      out,
	}
	// The Budget plugin reads a namespace's Budgets with a consistent list
	// on every charged write. Served by a watch cache, such a list waits for
	// etcd's progress notification, up to 100 ms on a quiet resource; from
	// etcd it is one range read. Budgets are few and rarely watched.
	o.RecommendedOptions.Etcd.WatchCacheSizes = []string{"budgets.gpu.kiln.dev#0"}
	configureAdmission(o.RecommendedOptions.Admission)
	o.RecommendedOptions.ExtraAdmissionInitializers = func(c *genericapiserver.RecommendedConfig) ([]admission.PluginInitializer, error) {
		k, err := newKilnClients(c.LoopbackClientConfig, c.SharedInformerFactory)
		if err != nil {
			return nil, err
		}
		o.kiln = k
		return []admission.PluginInitializer{k.initializer()}, nil
	}
	// Stored as kube-apiserver stores its own objects; --storage-media-type
	// can choose JSON or YAML instead.
	o.RecommendedOptions.Etcd.DefaultStorageMediaType = runtime.ContentTypeProtobuf
	// kube-apiserver's default: the aggregator multiplexes every tenant's
	// watches through Kiln onto few HTTP/2 connections, and Go's default of
	// 250 streams each would open more connections sooner.
	o.RecommendedOptions.SecureServing.HTTP2MaxStreamsPerConnection = 1000
	o.ServerRun = genericoptions.NewServerRunOptionsForComponent(basecompatibility.DefaultKubeComponent, o.ComponentGlobalsRegistry)
	return o
}

// registerKubeComponent makes the kube component's binary version that of
// the Kubernetes libraries Kiln is built with. k8s.io/apiserver registers
// it at init from component-base's gitVersion, which make stamps with
// Kiln's own version (v0.x): taken for Kubernetes', the server would
// emulate Kubernetes 0.x, and refuse to start since that is below the
// emulation floor. The floor is kube-apiserver's, three minor releases
// back.
func registerKubeComponent(r basecompatibility.ComponentGlobalsRegistry) {
	binary := utilversion.MustParse(baseversion.DefaultKubeBinaryVersion)
	if v := r.EffectiveVersionFor(basecompatibility.DefaultKubeComponent); v != nil && v.BinaryVersion().EqualTo(binary) {
		return
	}
	floor := binary.SubtractMinor(3)
	r.Reset()
	utilruntime.Must(r.Register(basecompatibility.DefaultKubeComponent,
		basecompatibility.NewEffectiveVersion(binary, false, floor, floor), utilfeature.DefaultMutableFeatureGate))
}

// AddFlags adds every flag of the server to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.RecommendedOptions.AddFlags(fs)
	o.ServerRun.AddUniversalFlags(fs)
	o.Standalone.AddFlags(fs)
	fs.IntVar(&o.MaxLogFollowsPerUser, "max-log-follows-per-user", o.MaxLogFollowsPerUser,
		"The most instances/log?follow=true streams one user may hold open at once; more are answered 429 with Retry-After. "+
			"Follows are long-running, so priority and fairness does not count them, yet each holds a stream to kube-apiserver and to the node's kubelet. 0 is no limit.")
}

// Complete fills in what depends on other flags. bindAddressSet says whether
// the user named --bind-address, which standalone mode must not widen.
func (o *Options) Complete(bindAddressSet, securePortSet bool) error {
	if o.Standalone.Enabled {
		return o.Standalone.complete(o.RecommendedOptions, bindAddressSet, securePortSet)
	}
	return nil
}

// Validate checks the flags.
func (o *Options) Validate() error {
	var errs []error
	if o.Standalone.Enabled {
		errs = append(errs, o.Standalone.validate(o.RecommendedOptions)...)
	} else {
		errs = append(errs, o.RecommendedOptions.Validate()...)
		errs = append(errs, validateAdmission(o.RecommendedOptions.Admission)...)
	}
	errs = append(errs, o.ServerRun.Validate()...)
	if o.MaxLogFollowsPerUser < 0 {
		errs = append(errs, fmt.Errorf("--max-log-follows-per-user=%d: must be 0 (no limit) or more", o.MaxLogFollowsPerUser))
	}
	return utilerrors.NewAggregate(errs)
}

// Config builds the server configuration from the options.
func (o *Options) Config(ctx context.Context) (*Config, error) {
	ro := o.RecommendedOptions
	if err := ro.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil,
		[]net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating self-signed serving certificate: %w", err)
	}
	serverConfig := genericapiserver.NewRecommendedConfig(Codecs)
	// instances/log follows a log for as long as the client reads it: no
	// request timeout, and no seat held in the in-flight limits.
	serverConfig.LongRunningFunc = genericfilters.BasicLongRunningRequestCheck(sets.NewString("watch"), sets.NewString("log"))
	serverConfig.BuildHandlerChainFunc = handlerChain(newFollowLimiter(o.MaxLogFollowsPerUser))
	namer := openapi.NewDefinitionNamer(Scheme)
	serverConfig.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(kilnopenapi.GetOpenAPIDefinitions, namer)
	serverConfig.OpenAPIConfig.Info.Title = "Kiln"
	serverConfig.OpenAPIConfig.Info.Version = "v1alpha1"
	// Server-side apply builds its type converter from the v3 definitions.
	serverConfig.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(kilnopenapi.GetOpenAPIDefinitions, namer)
	serverConfig.OpenAPIV3Config.Info.Title = "Kiln"
	serverConfig.OpenAPIV3Config.Info.Version = "v1alpha1"
	// Before RecommendedOptions: priority and fairness sizes itself from
	// the in-flight limits.
	if err := o.ServerRun.ApplyTo(&serverConfig.Config); err != nil {
		return nil, err
	}

	if err := applyStorageCodec(ro.Etcd); err != nil {
		return nil, err
	}
	if o.Standalone.Enabled {
		k, err := o.Standalone.applyTo(ctx, ro, serverConfig)
		if err != nil {
			return nil, err
		}
		o.kiln = k
	} else if err := ro.ApplyTo(serverConfig); err != nil {
		return nil, err
	} else if rh := serverConfig.Authentication.RequestHeaderConfig; rh != nil && serverConfig.Authentication.Authenticator != nil {
		serverConfig.Authentication.Authenticator = withFrontProxyCache(rh, serverConfig.Authentication.Authenticator)
		if a := serverConfig.Authorization.Authorizer; a != nil {
			serverConfig.Authorization.Authorizer = proxiedAuthorizer{next: a}
		}
	}
	return &Config{GenericConfig: serverConfig, kiln: o.kiln}, nil
}

// applyStorageCodec sets the codec etcd's objects go through: written as
// v1alpha1 in --storage-media-type, read in any of JSON, YAML and protobuf.
// Objects an older server stored as JSON therefore still read, and are
// rewritten in the new encoding on their next update.
func applyStorageCodec(etcd *genericoptions.EtcdOptions) error {
	codec, versioner, err := serverstorage.NewStorageCodec(serverstorage.StorageCodecConfig{
		StorageMediaType:  etcd.DefaultStorageMediaType,
		StorageSerializer: Codecs,
		StorageVersion:    v1alpha1.SchemeGroupVersion,
		MemoryVersion:     gpu.SchemeGroupVersion,
		Config:            etcd.StorageConfig,
	})
	if err != nil {
		return fmt.Errorf("--storage-media-type=%s: %w", etcd.DefaultStorageMediaType, err)
	}
	etcd.StorageConfig.Codec, etcd.StorageConfig.EncodeVersioner = codec, versioner
	return nil
}

// Run serves until ctx is done.
func (o *Options) Run(ctx context.Context) error {
	// The embedded etcd outlives the server, so requests still draining at
	// shutdown can finish their writes.
	defer o.Standalone.stop()
	config, err := o.Config(ctx)
	if err != nil {
		return err
	}
	server, err := config.Complete().New()
	if err != nil {
		return err
	}
	if o.Standalone.Enabled {
		server.GenericAPIServer.AddPostStartHookOrDie("write-standalone-kubeconfig", func(hc genericapiserver.PostStartHookContext) error {
			path, err := o.Standalone.writeKubeconfig(o.RecommendedOptions.SecureServing)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.Out, "Kiln is serving on https://%s\nkubeconfig: %s\ntry: kubectl --kubeconfig %s get gpu -A\n",
				net.JoinHostPort(o.RecommendedOptions.SecureServing.BindAddress.String(),
					fmt.Sprint(o.RecommendedOptions.SecureServing.BindPort)), path, path)
			klog.FromContext(ctx).Info("Wrote kubeconfig for the standalone server", "path", path)
			return nil
		})
	}
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}
