package apiserver

import (
	"context"
	"errors"
	"slices"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// askedAuthorizer allows the names in allow ("" for any object) and
// records the name of every question.
type askedAuthorizer struct {
	allow []string
	fail  bool
	asked []string
}

func (a *askedAuthorizer) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	a.asked = append(a.asked, attrs.GetName())
	if a.fail && attrs.GetName() == "" {
		return authorizer.DecisionNoOpinion, "", errors.New("review failed")
	}
	if slices.Contains(a.allow, attrs.GetName()) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no rule", nil
}

func (a *askedAuthorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

func (*askedAuthorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

func TestProxiedAuthorizer(t *testing.T) {
	tenant := &user.DefaultInfo{Name: "tenant-a", Groups: []string{"system:authenticated"}}
	getClaim := &request.RequestInfo{IsResourceRequest: true, Verb: "get", APIGroup: "gpu.kiln.dev", APIVersion: "v1alpha1",
		Namespace: "tenant-a", Resource: "claims", Name: "c1"}
	listClaims := &request.RequestInfo{IsResourceRequest: true, Verb: "list", APIGroup: "gpu.kiln.dev", APIVersion: "v1alpha1",
		Namespace: "tenant-a", Resource: "claims"}
	attrsOf := func(u user.Info, ri *request.RequestInfo) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: ri.Verb, APIGroup: ri.APIGroup, APIVersion: ri.APIVersion,
			Namespace: ri.Namespace, Resource: ri.Resource, Subresource: ri.Subresource, Name: ri.Name, ResourceRequest: true}
	}
	// An admission plugin's own question, about another object, during
	// the same request.
	use := authorizer.AttributesRecord{User: proxiedUser{tenant}, Verb: "use", APIGroup: "gpu.kiln.dev", APIVersion: "v1alpha1",
		Resource: "instancetypes", Name: "h100", ResourceRequest: true}
	// A create on update: the request's object, another verb.
	createOnUpdate := attrsOf(proxiedUser{tenant}, getClaim)
	createOnUpdate.Verb = "create"

	for _, tc := range []struct {
		name  string
		ri    *request.RequestInfo
		attrs authorizer.Attributes
		allow []string
		fail  bool
		want  authorizer.Decision
		asked []string
	}{
		{name: "proxied, any object allowed", ri: getClaim, attrs: attrsOf(proxiedUser{tenant}, getClaim),
			allow: []string{""}, want: authorizer.DecisionAllow, asked: []string{""}},
		{name: "proxied, only the named object allowed", ri: getClaim, attrs: attrsOf(proxiedUser{tenant}, getClaim),
			allow: []string{"c1"}, want: authorizer.DecisionAllow, asked: []string{"", "c1"}},
		{name: "proxied, another object allowed", ri: getClaim, attrs: attrsOf(proxiedUser{tenant}, getClaim),
			allow: []string{"c2"}, want: authorizer.DecisionNoOpinion, asked: []string{"", "c1"}},
		{name: "proxied, the review for any object fails", ri: getClaim, attrs: attrsOf(proxiedUser{tenant}, getClaim),
			allow: []string{"", "c1"}, fail: true, want: authorizer.DecisionAllow, asked: []string{"", "c1"}},
		{name: "proxied, no object named", ri: listClaims, attrs: attrsOf(proxiedUser{tenant}, listClaims),
			allow: []string{""}, want: authorizer.DecisionAllow, asked: []string{""}},
		{name: "a client certificate or a token", ri: getClaim, attrs: attrsOf(tenant, getClaim),
			allow: []string{""}, want: authorizer.DecisionNoOpinion, asked: []string{"c1"}},
		{name: "proxied, an admission plugin's question", ri: getClaim, attrs: use,
			allow: []string{""}, want: authorizer.DecisionNoOpinion, asked: []string{"h100"}},
		{name: "proxied, a create on update", ri: getClaim, attrs: createOnUpdate,
			allow: []string{""}, want: authorizer.DecisionNoOpinion, asked: []string{"c1"}},
		{name: "proxied, no request info", attrs: attrsOf(proxiedUser{tenant}, getClaim),
			allow: []string{""}, want: authorizer.DecisionNoOpinion, asked: []string{"c1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.ri != nil {
				ctx = request.WithRequestInfo(ctx, tc.ri)
			}
			next := &askedAuthorizer{allow: tc.allow, fail: tc.fail}
			got, _, _ := proxiedAuthorizer{next: next}.Authorize(ctx, tc.attrs)
			if got != tc.want {
				t.Errorf("decision %v, want %v", got, tc.want)
			}
			if !slices.Equal(next.asked, tc.asked) {
				t.Errorf("asked about %q, want %q", next.asked, tc.asked)
			}
		})
	}
}
