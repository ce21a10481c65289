package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	ns     = "db"
	region = "eu"
	sts    = "meridian-eu"
)

var stsGVR = appsv1.SchemeGroupVersion.WithResource("statefulsets")

// hooks fakes Meridian's admin API.
type hooks struct {
	mu      sync.Mutex
	started []string
	done    map[string]bool
	fail    map[string]error
}

func (h *hooks) Decommission(_ context.Context, node string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail[node]; err != nil {
		return err
	}
	h.started = append(h.started, node)
	return nil
}

func (h *hooks) Decommissioned(_ context.Context, node string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done[node], nil
}

func (h *hooks) finish(nodes ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range nodes {
		h.done[n] = true
	}
}

type harness struct {
	t   *testing.T
	cs  *fake.Clientset
	act *Actuator
	dec *hooks
	rv  int
}

// newHarness makes a fake cluster with StatefulSet meridian-eu at replicas (all ready), and the
// scale subresource emulated on it: the fake clientset does not implement it for StatefulSets.
// Every write through the harness bumps the StatefulSet's resourceVersion, and a scale update
// carrying a stale one gets a Conflict, as from the API server.
func newHarness(t *testing.T, replicas int32, edit func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, dec: &hooks{done: map[string]bool{}, fail: map[string]error{}}, rv: 1}
	h.cs = fake.NewClientset(&appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: sts, Namespace: ns, ResourceVersion: "1"},
		Spec:       appsv1.StatefulSetSpec{Replicas: &replicas},
		Status:     appsv1.StatefulSetStatus{Replicas: replicas, ReadyReplicas: replicas},
	})
	h.cs.PrependReactor("get", "statefulsets", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "scale" {
			return false, nil, nil
		}
		s, err := h.getSts(action.(k8stesting.GetAction).GetName())
		if err != nil {
			return true, nil, err
		}
		return true, toScale(s), nil
	})
	h.cs.PrependReactor("update", "statefulsets", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "scale" {
			return false, nil, nil
		}
		sc := action.(k8stesting.UpdateAction).GetObject().(*autoscalingv1.Scale)
		s, err := h.getSts(sc.Name)
		if err != nil {
			return true, nil, err
		}
		if sc.ResourceVersion != "" && sc.ResourceVersion != s.ResourceVersion {
			return true, nil, apierrors.NewConflict(stsGVR.GroupResource(), sc.Name,
				fmt.Errorf("resourceVersion %s is stale (now %s)", sc.ResourceVersion, s.ResourceVersion))
		}
		r := sc.Spec.Replicas
		s.Spec.Replicas = &r
		if err := h.putSts(s); err != nil {
			return true, nil, err
		}
		return true, toScale(s), nil
	})
	opts := Options{
		Client:         h.cs,
		Namespace:      ns,
		Decommission:   h.dec.Decommission,
		Decommissioned: h.dec.Decommissioned,
		Retry:          wait.Backoff{Steps: 3}, // no pause between attempts
	}
	if edit != nil {
		edit(&opts)
	}
	act, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.act = act
	return h
}

func toScale(s *appsv1.StatefulSet) *autoscalingv1.Scale {
	return &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, ResourceVersion: s.ResourceVersion},
		Spec:       autoscalingv1.ScaleSpec{Replicas: *s.Spec.Replicas},
		Status:     autoscalingv1.ScaleStatus{Replicas: s.Status.Replicas},
	}
}

func (h *harness) getSts(name string) (*appsv1.StatefulSet, error) {
	obj, err := h.cs.Tracker().Get(stsGVR, ns, name)
	if err != nil {
		return nil, err
	}
	return obj.(*appsv1.StatefulSet).DeepCopy(), nil
}

func (h *harness) putSts(s *appsv1.StatefulSet) error {
	h.rv++
	s.ResourceVersion = strconv.Itoa(h.rv)
	return h.cs.Tracker().Update(stsGVR, s, ns)
}

// replicas returns the StatefulSet's spec.replicas.
func (h *harness) replicas() int {
	h.t.Helper()
	s, err := h.getSts(sts)
	if err != nil {
		h.t.Fatal(err)
	}
	return int(*s.Spec.Replicas)
}

// setReady plays the StatefulSet controller: status.readyReplicas = ready.
func (h *harness) setReady(ready int32) {
	h.t.Helper()
	s, err := h.getSts(sts)
	if err != nil {
		h.t.Fatal(err)
	}
	s.Status.ReadyReplicas, s.Status.Replicas = ready, ready
	if err := h.putSts(s); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) nodes(wantServing, wantJoining int) {
	h.t.Helper()
	serving, joining, err := h.act.Nodes(context.Background(), region)
	if err != nil {
		h.t.Fatalf("Nodes: %v", err)
	}
	if serving != wantServing || joining != wantJoining {
		h.t.Fatalf("Nodes = serving %d, joining %d; want %d, %d", serving, joining, wantServing, wantJoining)
	}
}

func (h *harness) wantReplicas(want int) {
	h.t.Helper()
	if got := h.replicas(); got != want {
		h.t.Fatalf("spec.replicas = %d, want %d", got, want)
	}
}

func wantErr(t *testing.T, err error, substr ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", substr)
	}
	for _, s := range substr {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not contain %q", err, s)
		}
	}
}

func TestValidate(t *testing.T) {
	cs := fake.NewClientset()
	ok := func(context.Context, string) error { return nil }
	done := func(context.Context, string) (bool, error) { return true, nil }
	good := Options{Client: cs, Namespace: ns, Decommission: ok, Decommissioned: done}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		edit func(*Options)
		want string
	}{
		{func(o *Options) { o.Client = nil }, "Client is nil"},
		{func(o *Options) { o.Namespace = "" }, "Namespace is empty"},
		{func(o *Options) { o.Decommission = nil }, "Decommission is nil"},
		{func(o *Options) { o.Decommissioned = nil }, "Decommissioned is nil"},
		{func(o *Options) { o.MaxReplicas = -1 }, "MaxReplicas"},
	} {
		o := good
		c.edit(&o)
		wantErr(t, o.Validate(), c.want)
		_, err := New(o)
		wantErr(t, err, c.want)
	}
	a, err := New(good)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.opts.StatefulSet("us"); got != "meridian-us" {
		t.Errorf("default StatefulSet(us) = %q", got)
	}
	if got := a.opts.NodeName("meridian-us", 7); got != "meridian-us-7" {
		t.Errorf("default NodeName = %q", got)
	}
	if a.opts.MaxReplicas != DefaultMaxReplicas {
		t.Errorf("default MaxReplicas = %d", a.opts.MaxReplicas)
	}
}

func TestAddJoinsUntilReady(t *testing.T) {
	h := newHarness(t, 3, nil)
	ctx := context.Background()
	h.nodes(3, 0)
	if err := h.act.Add(ctx, region, 2); err != nil {
		t.Fatal(err)
	}
	h.wantReplicas(5)
	h.nodes(3, 2)
	h.setReady(4)
	h.nodes(4, 1)
	h.setReady(5)
	h.nodes(5, 0)
	wantErr(t, h.act.Add(ctx, region, 0), "kube: region eu", "positive")
	wantErr(t, h.act.Add(ctx, "nowhere", 1), "kube: region nowhere", "meridian-nowhere")
}

func TestMaxReplicas(t *testing.T) {
	h := newHarness(t, 3, func(o *Options) { o.MaxReplicas = 4 })
	ctx := context.Background()
	wantErr(t, h.act.Add(ctx, region, 2), "kube: region eu", "MaxReplicas 4")
	h.wantReplicas(3)
	if err := h.act.Add(ctx, region, 1); err != nil {
		t.Fatal(err)
	}
	h.wantReplicas(4)
	wantErr(t, h.act.Add(ctx, region, 1), "MaxReplicas 4")
	h.wantReplicas(4)
}

func TestRemoveDecommissionsBeforeScaleDown(t *testing.T) {
	h := newHarness(t, 5, nil)
	ctx := context.Background()
	if err := h.act.Remove(ctx, region, 2); err != nil {
		t.Fatal(err)
	}
	want := []string{"meridian-eu-4", "meridian-eu-3"}
	if !slices.Equal(h.dec.started, want) {
		t.Fatalf("decommissioned %v, want %v", h.dec.started, want)
	}
	if got := h.act.Pending(region); !slices.Equal(got, want) {
		t.Fatalf("Pending = %v, want %v", got, want)
	}
	// Nothing is done: the pods stay, the drained nodes no longer serve.
	h.nodes(3, 0)
	h.wantReplicas(5)
	// The lower one done first: the higher still holds data, so no pod may go.
	h.dec.finish("meridian-eu-3")
	h.nodes(3, 0)
	h.wantReplicas(5)
	// The higher done: both go.
	h.dec.finish("meridian-eu-4")
	h.nodes(3, 0)
	h.wantReplicas(3)
	if got := h.act.Pending(region); len(got) != 0 {
		t.Fatalf("Pending = %v after the scale-down", got)
	}
	h.setReady(3)
	h.nodes(3, 0)
	// The region accepts a removal again.
	if err := h.act.Remove(ctx, region, 1); err != nil {
		t.Fatal(err)
	}
	if got := h.act.Pending(region); !slices.Equal(got, []string{"meridian-eu-2"}) {
		t.Fatalf("Pending = %v", got)
	}
}

func TestRemovePartialProgress(t *testing.T) {
	h := newHarness(t, 5, nil)
	ctx := context.Background()
	if err := h.act.Remove(ctx, region, 2); err != nil {
		t.Fatal(err)
	}
	h.dec.finish("meridian-eu-4")
	h.nodes(3, 0) // ready 5 capped at spec 4, less meridian-eu-3 draining
	h.wantReplicas(4)
	if got := h.act.Pending(region); !slices.Equal(got, []string{"meridian-eu-3"}) {
		t.Fatalf("Pending = %v", got)
	}
	h.dec.finish("meridian-eu-3")
	h.nodes(3, 0)
	h.wantReplicas(3)
}

func TestRemoveRefusals(t *testing.T) {
	h := newHarness(t, 2, nil)
	ctx := context.Background()
	wantErr(t, h.act.Remove(ctx, region, 2), "kube: region eu", "fewer than 1 replica")
	wantErr(t, h.act.Remove(ctx, region, 0), "kube: region eu", "positive")
	if len(h.dec.started) != 0 {
		t.Fatalf("decommissioned %v after a refused removal", h.dec.started)
	}
	if err := h.act.Remove(ctx, region, 1); err != nil {
		t.Fatal(err)
	}
	wantErr(t, h.act.Remove(ctx, region, 1), "kube: region eu", "still pending")
	wantErr(t, h.act.Add(ctx, region, 1), "kube: region eu", "still pending")
	h.wantReplicas(2)
	if !slices.Equal(h.dec.started, []string{"meridian-eu-1"}) {
		t.Fatalf("decommissioned %v", h.dec.started)
	}
}

func TestRemoveDecommissionFails(t *testing.T) {
	h := newHarness(t, 5, nil)
	ctx := context.Background()
	h.dec.fail["meridian-eu-3"] = errors.New("admin API down")
	wantErr(t, h.act.Remove(ctx, region, 3), "kube: region eu", "meridian-eu-3", "admin API down")
	// The one started stays pending (it is the highest ordinal), and completes.
	if got := h.act.Pending(region); !slices.Equal(got, []string{"meridian-eu-4"}) {
		t.Fatalf("Pending = %v", got)
	}
	h.dec.finish("meridian-eu-4")
	h.nodes(4, 0)
	h.wantReplicas(4)
}

func TestScaledUpDuringRemoval(t *testing.T) {
	h := newHarness(t, 3, nil)
	ctx := context.Background()
	if err := h.act.Remove(ctx, region, 1); err != nil {
		t.Fatal(err)
	}
	// Someone else (kubectl scale) raises the StatefulSet above the drained node.
	s, err := h.getSts(sts)
	if err != nil {
		t.Fatal(err)
	}
	four := int32(4)
	s.Spec.Replicas = &four
	if err := h.putSts(s); err != nil {
		t.Fatal(err)
	}
	h.dec.finish("meridian-eu-2")
	_, _, err = h.act.Nodes(ctx, region)
	wantErr(t, err, "kube: region eu", "scaled up during a removal")
	h.wantReplicas(4) // meridian-eu-3 holds data: no scale-down
}

func TestConflictRetried(t *testing.T) {
	h := newHarness(t, 3, nil)
	ctx := context.Background()
	attempts := 0
	// A concurrent writer changes the StatefulSet between our read and our write, once.
	h.cs.PrependReactor("update", "statefulsets", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "scale" {
			return false, nil, nil
		}
		attempts++
		if attempts == 1 {
			s, err := h.getSts(sts)
			if err != nil {
				return true, nil, err
			}
			if s.Annotations == nil {
				s.Annotations = map[string]string{}
			}
			s.Annotations["someone"] = "else"
			if err := h.putSts(s); err != nil {
				return true, nil, err
			}
		}
		return false, nil, nil // on to the scale emulation, which checks the resourceVersion
	})
	if err := h.act.Add(ctx, region, 1); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Fatalf("%d update attempts, want 2 (one conflict, one retry)", attempts)
	}
	h.wantReplicas(4)

	// The scale-down in Nodes retries as well.
	h.setReady(4)
	if err := h.act.Remove(ctx, region, 1); err != nil {
		t.Fatal(err)
	}
	h.dec.finish("meridian-eu-3")
	attempts = 0
	h.nodes(3, 0)
	if attempts != 2 {
		t.Fatalf("%d update attempts, want 2", attempts)
	}
	h.wantReplicas(3)
}

func TestConflictRetriesBounded(t *testing.T) {
	h := newHarness(t, 3, nil)
	attempts := 0
	h.cs.PrependReactor("update", "statefulsets", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "scale" {
			return false, nil, nil
		}
		attempts++
		return true, nil, apierrors.NewConflict(stsGVR.GroupResource(), sts, errors.New("always"))
	})
	err := h.act.Add(context.Background(), region, 1)
	wantErr(t, err, "kube: region eu")
	if !apierrors.IsConflict(err) {
		t.Fatalf("error %v is not a conflict", err)
	}
	if attempts != 3 {
		t.Fatalf("%d attempts, want Retry.Steps = 3", attempts)
	}
	h.wantReplicas(3)
}
