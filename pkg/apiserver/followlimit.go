package apiserver

import (
	"fmt"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// DefaultMaxLogFollowsPerUser is --max-log-follows-per-user's default.
const DefaultMaxLogFollowsPerUser = 100

// followRetryAfterSeconds is what a refused follow is told to wait. A
// follow ends when its client leaves, at no set time; client-go retries a
// 429 with Retry-After up to ten times, so kubectl waits ten seconds for a
// place before it shows the message, not a minute and a half.
const followRetryAfterSeconds = 1

// followLimiter bounds how many instances/log?follow=true streams one user
// holds at once. A follow is long-running, so neither priority and
// fairness nor max-in-flight counts it, yet each holds a stream to
// kube-apiserver and one to the node's kubelet, which watches the log file
// with an inotify instance of its own: 128 per node by the kernel's
// default, shared by every tenant whose Instances run there.
type followLimiter struct {
	max  int
	mu   sync.Mutex
	held map[string]int
}

func newFollowLimiter(max int) *followLimiter {
	return &followLimiter{max: max, held: map[string]int{}}
}

// wrap answers 429 with Retry-After to a follow past the user's limit; it
// runs after authentication and authorization, so only requests that would
// be served count. A max of 0 or less is no limit.
func (l *followLimiter) wrap(next http.Handler) http.Handler {
	if l.max <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, ok := request.UserFrom(req.Context())
		if !ok || !isLogFollow(req) {
			next.ServeHTTP(w, req)
			return
		}
		user := u.GetName()
		if !l.acquire(user) {
			err := apierrors.NewTooManyRequests(fmt.Sprintf(
				"user %q already follows %d instance logs, the most one user may (kiln-apiserver --max-log-follows-per-user=%d): close a follow (kubectl gpu logs -f) before opening another, or read without follow=true",
				user, l.max, l.max), followRetryAfterSeconds)
			responsewriters.ErrorNegotiated(err, Codecs, schema.GroupVersion{}, w, req)
			return
		}
		defer l.release(user)
		next.ServeHTTP(w, req)
	})
}

func (l *followLimiter) acquire(user string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[user] >= l.max {
		return false
	}
	l.held[user]++
	return true
}

func (l *followLimiter) release(user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[user]--; l.held[user] <= 0 {
		delete(l.held, user)
	}
}

// isLogFollow says whether req reads a log of Kiln's with follow, decoding
// the parameter as InstanceLogOptions does: present and neither "0" nor
// "false" is true.
func isLogFollow(req *http.Request) bool {
	info, ok := request.RequestInfoFrom(req.Context())
	if !ok || !info.IsResourceRequest || info.Subresource != "log" || info.Verb != "get" {
		return false
	}
	values := req.URL.Query()["follow"]
	var follow bool
	return runtime.Convert_Slice_string_To_bool(&values, &follow, nil) == nil && follow
}
