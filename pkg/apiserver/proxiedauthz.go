package apiserver

import (
	"context"
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// kube-apiserver authorizes every request it proxies to Kiln, for its
// verb, resource, namespace and object name, before it proxies it; Kiln
// then asks kube-apiserver the same question again with a
// SubjectAccessReview. The delegated authorizer caches answers for 10 s
// keyed by the object's name, so kiln-controller's reads and status writes
// of a thousand Instances were a thousand reviews each: 2.2–2.3 per Claim
// and per new Instance in bench-scale, each one a round trip inside the
// request.
//
// A request the aggregator proxied is authorized here for any object of
// that resource in its namespace first, a question whose answer the cache
// keeps for every object there; only when that is denied (a grant of
// named objects only) is the object's own name asked. Whoever holds the
// front-proxy certificate may already assert any user and group to Kiln,
// system:masters included, so this trusts kube-apiserver with nothing it
// was not trusted with. Everything else is asked as it comes: a request
// authenticated any other way (a client certificate, a token), an
// impersonated user, and every question that is not the request's own
// (admission's, a create on update).

// proxiedUser is the user of a request that came with the front-proxy
// certificate, as frontProxyAuthenticator verified it.
type proxiedUser struct{ user.Info }

// markProxied wraps the users a authenticates as proxiedUser.
func markProxied(a authenticator.Request) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		resp, ok, err := a.AuthenticateRequest(req)
		if ok && resp != nil && resp.User != nil {
			marked := *resp
			marked.User = proxiedUser{resp.User}
			return &marked, ok, err
		}
		return resp, ok, err
	})
}

// proxiedAuthorizer asks next about any object of the resource before the
// one named, for a proxied request's own authorization.
type proxiedAuthorizer struct{ next authorizer.Authorizer }

func (a proxiedAuthorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if _, ok := attrs.GetUser().(proxiedUser); !ok || attrs.GetName() == "" || !ownRequest(ctx, attrs) {
		return a.next.Authorize(ctx, attrs)
	}
	if d, reason, err := a.next.Authorize(ctx, anyName{attrs}); err == nil && d == authorizer.DecisionAllow {
		return d, reason, nil
	}
	return a.next.Authorize(ctx, attrs)
}

// ConditionsAwareAuthorize is Authorize's decision: the delegated
// authorizer it wraps knows no conditions either.
func (a proxiedAuthorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

func (proxiedAuthorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// ownRequest says whether attrs are those of the request in ctx, which
// kube-apiserver authorized before proxying it.
func ownRequest(ctx context.Context, attrs authorizer.Attributes) bool {
	ri, ok := request.RequestInfoFrom(ctx)
	return ok && ri.IsResourceRequest && attrs.IsResourceRequest() &&
		ri.Verb == attrs.GetVerb() && ri.APIGroup == attrs.GetAPIGroup() && ri.APIVersion == attrs.GetAPIVersion() &&
		ri.Namespace == attrs.GetNamespace() && ri.Resource == attrs.GetResource() &&
		ri.Subresource == attrs.GetSubresource() && ri.Name == attrs.GetName()
}

// anyName asks about every object of the resource: RBAC allows a request
// without a name only by rules that name no objects.
type anyName struct{ authorizer.Attributes }

func (anyName) GetName() string { return "" }
