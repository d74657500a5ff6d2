package localcluster

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestKwokDeleteOverdue(t *testing.T) {
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	deleted := func(ago time.Duration, grace int64, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			DeletionTimestamp:          ptr.To(metav1.NewTime(now.Add(-ago))),
			DeletionGracePeriodSeconds: ptr.To(grace),
			Annotations:                annotations,
		}}
	}
	withFinalizer := func(p *corev1.Pod) *corev1.Pod {
		p.Finalizers = []string{"example.com/keep"}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{name: "not deleted", pod: &corev1.Pod{}},
		{name: "within its grace period", pod: deleted(-20*time.Second, 30, nil)},
		{name: "just past its deadline: kwok may still be at it", pod: deleted(time.Second, 1, nil)},
		{name: "overdue with kwok's delete not landed", pod: deleted(kwokRetryOverdue, 1, nil), want: true},
		// kube-apiserver writes the grace period of 0 and then deletes, in
		// two steps of etcd: when the second fails, the Pod stays, with
		// nothing left to wait for.
		{name: "overdue, grace 0 written but the delete itself lost", pod: deleted(kwokRetryOverdue, 0, nil), want: true},
		{name: "overdue after kwok's delete: someone's finalizer keeps it", pod: withFinalizer(deleted(time.Minute, 0, nil))},
		{name: "overdue with kwok's delete not landed, and a finalizer", pod: withFinalizer(deleted(kwokRetryOverdue, 1, nil)), want: true},
		{name: "overdue, its status left to a test", pod: deleted(time.Minute, 1, map[string]string{CustomStatusAnnotation: "custom"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := kwokDeleteOverdue(tc.pod, now); got != tc.want {
				t.Errorf("kwokDeleteOverdue = %v, want %v", got, tc.want)
			}
		})
	}
}
