package apiserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// followRequest is what the generic chain makes of a request by user for
// path: the user and the RequestInfo in its context.
func followRequest(t *testing.T, userName, path string) *http.Request {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	resolver := &request.RequestInfoFactory{APIPrefixes: sets.NewString("apis"), GrouplessAPIPrefixes: sets.NewString()}
	info, err := resolver.NewRequestInfo(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx := request.WithRequestInfo(req.Context(), info)
	return req.WithContext(request.WithUser(ctx, &user.DefaultInfo{Name: userName}))
}

const logPath = "/apis/gpu.kiln.dev/v1alpha1/namespaces/team-a/instances/nb/log"

func TestIsLogFollow(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
	}{
		{logPath + "?follow=true", true},
		{logPath + "?follow=1", true},
		{logPath + "?follow=True", true},
		// InstanceLogOptions decodes any value but 0 and false as true.
		{logPath + "?follow=", true},
		{logPath + "?follow=yes", true},
		{logPath + "?follow=false", false},
		{logPath + "?follow=0", false},
		{logPath + "?tailLines=10", false},
		{logPath, false},
		{"/apis/gpu.kiln.dev/v1alpha1/namespaces/team-a/instances/nb?follow=true", false},
		{"/apis/gpu.kiln.dev/v1alpha1/namespaces/team-a/instances?watch=true&follow=true", false},
		{"/healthz?follow=true", false},
	} {
		if got := isLogFollow(followRequest(t, "alice", tc.path)); got != tc.want {
			t.Errorf("isLogFollow(%s) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

// TestFollowLimiter holds follows open in a handler that blocks, and
// checks who is refused and that a closed follow frees its place.
func TestFollowLimiter(t *testing.T) {
	release := make(chan struct{})
	var started sync.WaitGroup
	handler := newFollowLimiter(2).wrap(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if isLogFollow(req) {
			started.Done()
			<-release
		}
	}))
	serve := func(userName, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, followRequest(t, userName, path))
		return rec
	}
	var held sync.WaitGroup
	for range 2 {
		started.Add(1)
		held.Go(func() {
			if rec := serve("alice", logPath+"?follow=true"); rec.Code != http.StatusOK {
				t.Errorf("alice's follow within the limit: %d %s", rec.Code, rec.Body)
			}
		})
	}
	started.Wait()

	for _, tc := range []struct {
		name, user, path string
		want             int
	}{
		{"a third follow of the same user", "alice", logPath + "?follow=true", http.StatusTooManyRequests},
		{"the same user reading without follow", "alice", logPath + "?tailLines=5", http.StatusOK},
		{"the same user's other requests", "alice", "/apis/gpu.kiln.dev/v1alpha1/namespaces/team-a/instances", http.StatusOK},
	} {
		if rec := serve(tc.user, tc.path); rec.Code != tc.want {
			t.Errorf("%s: %d, want %d: %s", tc.name, rec.Code, tc.want, rec.Body)
		}
	}

	started.Add(1)
	go serve("bob", logPath+"?follow=true")
	started.Wait() // another user's follow is served while alice is at her limit

	rec := serve("alice", logPath+"?follow=1")
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("alice past her limit: %d, want 429", rec.Code)
	}
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
	var status metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
		t.Fatalf("429 body is not a Status: %v: %s", err, rec.Body)
	}
	if status.Kind != "Status" || status.Reason != metav1.StatusReasonTooManyRequests || status.Code != http.StatusTooManyRequests ||
		status.Details == nil || status.Details.RetryAfterSeconds != 1 {
		t.Errorf("429 Status = %+v", status)
	}
	for _, want := range []string{`user "alice"`, "2 instance logs", "--max-log-follows-per-user=2"} {
		if !strings.Contains(status.Message, want) {
			t.Errorf("message %q lacks %q", status.Message, want)
		}
	}

	close(release)
	held.Wait()
	started.Add(1)
	if rec := serve("alice", logPath+"?follow=true"); rec.Code != http.StatusOK {
		t.Errorf("alice's follow after hers closed: %d %s", rec.Code, rec.Body)
	}
}

func TestFollowLimiterOff(t *testing.T) {
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	h := newFollowLimiter(0).wrap(next)
	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, followRequest(t, "alice", logPath+"?follow=true"))
		if rec.Code != http.StatusOK {
			t.Fatalf("no limit: %d", rec.Code)
		}
	}
}
