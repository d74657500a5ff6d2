package apiserver

import (
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/streaming/pkg/httpstream"
)

// refuseUpgrade answers a request to upgrade the connection with 400,
// except a watch, which may be served over a WebSocket. Nothing else Kiln
// serves streams over an upgraded connection. Served as a plain request,
// the aggregator, which proxies the upgrade, would see a 200 where it
// waits for 101 and answer the client 503; a 4xx it passes on.
func refuseUpgrade(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if httpstream.IsUpgradeRequest(req) && !isWatch(req) {
			err := apierrors.NewBadRequest("connection upgrade (" + req.Header.Get("Upgrade") +
				") is not supported on " + req.URL.Path + ": only a watch may be served over a WebSocket; send the request without the Connection: Upgrade header")
			responsewriters.ErrorNegotiated(err, Codecs, schema.GroupVersion{}, w, req)
			return
		}
		next.ServeHTTP(w, req)
	})
}

func isWatch(req *http.Request) bool {
	w := req.URL.Query().Get("watch")
	return w == "true" || w == "1" || strings.Contains(req.URL.Path, "/watch/")
}

// handlerChain is the generic chain around an API handler that, after
// authentication, authorization and priority and fairness, refuses
// upgrades and bounds each user's log follows.
func handlerChain(follows *followLimiter) func(http.Handler, *genericapiserver.Config) http.Handler {
	return func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		return genericapiserver.DefaultBuildHandlerChain(refuseUpgrade(follows.wrap(apiHandler)), c)
	}
}
