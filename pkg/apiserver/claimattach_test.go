//go:build integration

package apiserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// status sends a request and reads the Status it answers with.
func status(t *testing.T, method, path, body string) (int, metav1.Status) {
	t.Helper()
	code, data := rawRequest(t, method, path, "application/json", "application/json", body)
	var s metav1.Status
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("%s %s answered %d with %s: %v", method, path, code, data, err)
	}
	return code, s
}

func instanceOn(ns, name, claim string, cards int32) *gpuv1.Instance {
	inst := instance(ns, name, "h100", cards)
	inst.Spec.ClaimName = claim
	return inst
}

// TestClaimAttach: over HTTP, on the real server, an Instance that does
// not fit its Claim is 422 at spec.claimName; a second running Instance
// on a Claim is 409 naming the first; a Claim an Instance runs on cannot
// be deleted until the Instance stops. An Instance cannot move to another
// Claim, and stops and starts on its own.
func TestClaimAttach(t *testing.T) {
	const ns = "claim-attach"
	c := ctx(t)
	gpu := client.GpuV1alpha1()
	base := "/apis/gpu.kiln.dev/v1alpha1/namespaces/" + ns

	mig := &gpuv1.Claim{ObjectMeta: metav1.ObjectMeta{Name: "mig", Namespace: ns},
		Spec: gpuv1.ClaimSpec{Type: "h100", Partition: "1g.10gb"}}
	if _, err := gpu.Claims(ns).Create(c, mig, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(instanceOn(ns, "big", "mig", 8))
	if err != nil {
		t.Fatal(err)
	}
	code, s := status(t, "POST", base+"/instances", string(body))
	if code != http.StatusUnprocessableEntity || s.Details == nil || len(s.Details.Causes) != 1 || s.Details.Causes[0].Field != "spec.claimName" {
		t.Fatalf("8 cards on a 1g.10gb Claim: %d %+v, want 422 with one cause at spec.claimName", code, s)
	}
	if want := `claim "mig" holds 1 partition of 1g.10gb; an Instance of 8 accelerators does not fit`; !strings.Contains(s.Message, want) {
		t.Errorf("message %q, want it to say %q", s.Message, want)
	}
	if _, err := gpu.Instances(ns).Get(c, "big", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused Instance: %v, want it not stored", err)
	}

	// One running Instance per Claim.
	cards := &gpuv1.Claim{ObjectMeta: metav1.ObjectMeta{Name: "cards", Namespace: ns},
		Spec: gpuv1.ClaimSpec{Type: "h100", Accelerators: ptr.To[int32](2)}}
	if _, err := gpu.Claims(ns).Create(c, cards, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first, err := gpu.Instances(ns).Create(c, instanceOn(ns, "first", "cards", 2), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("an Instance on its Claim: %v", err)
	}
	first.Spec.ClaimName = "mig"
	_, err = gpu.Instances(ns).Update(c, first, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.claimName") ||
		!strings.Contains(err.Error(), "delete and recreate the Instance to move it to another Claim") {
		t.Errorf("moving an Instance to another Claim: %v, want 422 at spec.claimName", err)
	}
	body, _ = json.Marshal(instanceOn(ns, "second", "cards", 1))
	code, s = status(t, "POST", base+"/instances", string(body))
	if code != http.StatusConflict || !strings.Contains(s.Message, `claim "cards" is in use by Instance "first", which is running; stop it first`) {
		t.Fatalf("a second running Instance on the Claim: %d %q, want 409 naming Instance first", code, s.Message)
	}
	second := instanceOn(ns, "second", "cards", 1)
	second.Spec.Stopped = true
	if _, err := gpu.Instances(ns).Create(c, second, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a stopped second Instance on the Claim: %v", err)
	}
	if code, _, msg := post(t, ns, "second", "start"); code != http.StatusConflict || !strings.Contains(msg, `Instance "first"`) {
		t.Errorf("starting the second Instance: %d %q, want 409 naming Instance first", code, msg)
	}

	// The Claim cannot go while an Instance runs on it.
	code, s = status(t, "DELETE", base+"/claims/cards", "")
	want := fmt.Sprintf(`claim "cards" is attached to Instance "first", which is running; stop it first (kubectl -n %s patch instances.gpu.kiln.dev first`, ns)
	if code != http.StatusConflict || !strings.Contains(s.Message, want) {
		t.Fatalf("deleting the Claim: %d %q, want 409 saying %q", code, s.Message, want)
	}
	if _, err := gpu.Claims(ns).Get(c, "cards", metav1.GetOptions{}); err != nil {
		t.Fatalf("the Claim after a refused delete: %v", err)
	}
	if code, _, msg := post(t, ns, "first", "stop"); code != http.StatusCreated {
		t.Fatalf("stopping the first Instance: %d %s", code, msg)
	}
	if code, data := rawRequest(t, "DELETE", base+"/claims/cards", "application/json", "", ""); code != http.StatusOK {
		t.Fatalf("deleting the Claim once its Instance stopped: %d %s", code, data)
	}
	// KilnFinalizers gave it the claim loop's finalizer and the ledger's:
	// it waits, Terminating, for kiln-controller, which standalone does
	// not run. The admin takes them off as the two loops would.
	cl, err := gpu.Claims(ns).Get(c, "cards", metav1.GetOptions{})
	if err != nil || cl.DeletionTimestamp == nil || !slices.Equal(cl.Finalizers, []string{gpuv1.ClaimFinalizer, gpuv1.LedgerFinalizer}) {
		t.Fatalf("the deleted Claim: %v, %v; want it Terminating with Kiln's two finalizers", cl, err)
	}
	if _, err := gpu.Claims(ns).Patch(c, "cards", types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("taking the finalizers off: %v", err)
	}
	if _, err := gpu.Claims(ns).Get(c, "cards", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the deleted Claim without its finalizers: %v, want it gone", err)
	}
	code, _, msg := post(t, ns, "first", "start")
	if code != http.StatusUnprocessableEntity || !strings.Contains(msg, `no claim "cards" in namespace "claim-attach"; create the Claim first, or remove spec.claimName`) {
		t.Errorf("starting an Instance on a deleted Claim: %d %q, want 422 saying to create the Claim", code, msg)
	}
}
