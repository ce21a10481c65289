// Package kube is the autoscaler's Kubernetes actuator: it carries out a region's scaling
// decisions (autoscale.Actuator) by resizing that region's StatefulSet.
//
// # Design
//
// Meridian runs one StatefulSet per region (by default "meridian-<region>"); the pod
// "<sts>-<ordinal>" is the Meridian node of the same name (Options.NodeName says otherwise).
// Adding nodes is raising spec.replicas: the new pods start, join the cluster and count as
// joining until the StatefulSet reports them ready.
//
// Removing nodes is the delicate half. A StatefulSet scale-down always deletes the pods with the
// highest ordinals first, so those are the nodes a removal must pick: Remove decommissions the n
// highest ordinals through Meridian's admin API (Options.Decommission) and only records them as
// pending. Their data must move away before their pods go, so spec.replicas is not lowered yet;
// Nodes, which the control loop calls every period, asks Options.Decommissioned about the
// pending nodes, highest ordinal first, and lowers spec.replicas past the ones that are done
// (never past one that is not, as that would delete a pod still holding data). While a removal
// is pending the region accepts neither another Remove nor an Add: a second removal would stack
// on an unfinished one, and an addition would put new pods above the drained ones, which a
// scale-down could then no longer reach.
//
// Resizing goes through the StatefulSet's scale subresource (GetScale/UpdateScale), as
// `kubectl scale` and the HorizontalPodAutoscaler do, rather than Get + Update of the whole
// StatefulSet: it writes spec.replicas and nothing else, so it cannot clobber a concurrent edit
// of the pod template (a rollout, a Helm upgrade), and the actuator's RBAC role needs only
// statefulsets/scale (get, update) and statefulsets (get). Writes carry the resourceVersion
// they read (optimistic concurrency) and are retried on a conflict with
// retry.RetryOnConflict. The fake clientset does not implement the scale subresource for
// StatefulSets, so the tests install reactors that emulate it on the StatefulSet object.
//
// Pending removals live in memory. An actuator that restarts forgets them: the drained nodes
// stay up (counted as serving) until the controller removes nodes again, which picks the same
// highest ordinals, so Decommission must be idempotent and Decommissioned then reports them
// done at once.
//
// The package is apart from internal/autoscale because client-go and the Kubernetes API types
// are heavy: only the Kubernetes build of the binary imports this package and links them; the
// emulated cluster, the lab and the tests of the controller do not.
package kube

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"meridian/internal/autoscale"
)

// DefaultMaxReplicas bounds a region's StatefulSet when Options.MaxReplicas is zero.
const DefaultMaxReplicas = 100

// Options configures an Actuator.
type Options struct {
	// Client talks to the Kubernetes API server.
	Client kubernetes.Interface
	// Namespace holds the regions' StatefulSets.
	Namespace string
	// StatefulSet names a region's StatefulSet (default "meridian-"+region).
	StatefulSet func(region string) string
	// NodeName names the Meridian node run by pod ordinal of StatefulSet sts (default
	// "<sts>-<ordinal>", the pod's name).
	NodeName func(sts string, ordinal int) string
	// Decommission starts moving node's data away (Meridian's admin API). It should be
	// idempotent.
	Decommission func(ctx context.Context, node string) error
	// Decommissioned reports whether node's decommission is complete (its pod may go).
	Decommissioned func(ctx context.Context, node string) (bool, error)
	// MaxReplicas bounds each StatefulSet's spec.replicas (default DefaultMaxReplicas).
	MaxReplicas int
	// Retry paces the retries of a write that met a conflict (default retry.DefaultRetry:
	// 5 attempts, 10ms apart).
	Retry wait.Backoff
}

// Validate reports the first missing or invalid option.
func (o Options) Validate() error {
	switch {
	case o.Client == nil:
		return errors.New("kube: Options.Client is nil")
	case o.Namespace == "":
		return errors.New("kube: Options.Namespace is empty")
	case o.Decommission == nil:
		return errors.New("kube: Options.Decommission is nil (nodes must be decommissioned before their pods are removed)")
	case o.Decommissioned == nil:
		return errors.New("kube: Options.Decommissioned is nil (nodes must be decommissioned before their pods are removed)")
	case o.MaxReplicas < 0 || o.MaxReplicas > math.MaxInt32:
		return fmt.Errorf("kube: Options.MaxReplicas is %d, must be in [1, %d] (or 0 for the default %d)", o.MaxReplicas, math.MaxInt32, DefaultMaxReplicas)
	case o.Retry.Steps < 0:
		return fmt.Errorf("kube: Options.Retry.Steps is %d, must be positive (or 0 for the default)", o.Retry.Steps)
	}
	return nil
}

// Actuator resizes one StatefulSet per region. It implements autoscale.Actuator. Its methods
// are safe for concurrent use; they run one at a time.
type Actuator struct {
	opts Options

	mu      sync.Mutex
	pending map[string][]pendingNode // region → nodes being decommissioned, highest ordinal first
}

var _ autoscale.Actuator = (*Actuator)(nil)

// pendingNode is a node decommissioned by Remove whose pod is still there.
type pendingNode struct {
	ordinal int
	name    string
}

// New returns an Actuator, or the options' error.
func New(opts Options) (*Actuator, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.StatefulSet == nil {
		opts.StatefulSet = func(region string) string { return "meridian-" + region }
	}
	if opts.NodeName == nil {
		opts.NodeName = func(sts string, ordinal int) string { return fmt.Sprintf("%s-%d", sts, ordinal) }
	}
	if opts.MaxReplicas == 0 {
		opts.MaxReplicas = DefaultMaxReplicas
	}
	if opts.Retry.Steps == 0 {
		opts.Retry = retry.DefaultRetry
	}
	return &Actuator{opts: opts, pending: make(map[string][]pendingNode)}, nil
}

// Pending returns the names of region's nodes being decommissioned, highest ordinal first.
func (a *Actuator) Pending(region string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, p := range a.pending[region] {
		out = append(out, p.name)
	}
	return out
}

// Nodes completes region's pending removal as far as its decommissions allow, then reports the
// StatefulSet's ready pods less those being decommissioned as serving, and the pods not yet
// ready as joining.
func (a *Actuator) Nodes(ctx context.Context, region string) (serving, joining int, err error) {
	if region == "" {
		return 0, 0, errors.New("kube: empty region")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.complete(ctx, region); err != nil {
		return 0, 0, err
	}
	name := a.opts.StatefulSet(region)
	sts, err := a.opts.Client.AppsV1().StatefulSets(a.opts.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, 0, a.errorf(region, "get statefulset %s/%s: %w", a.opts.Namespace, name, err)
	}
	replicas := 1 // the API server's default for a nil spec.replicas
	if sts.Spec.Replicas != nil {
		replicas = int(*sts.Spec.Replicas)
	}
	// Pods above spec.replicas that still report ready are on their way out.
	ready := min(int(sts.Status.ReadyReplicas), replicas)
	serving = max(0, ready-len(a.pending[region]))
	joining = max(0, replicas-ready)
	return serving, joining, nil
}

// complete lowers region's spec.replicas past the pending nodes whose decommission is done,
// highest ordinal first, stopping at the first that is not. The caller holds a.mu.
func (a *Actuator) complete(ctx context.Context, region string) error {
	pend := a.pending[region]
	if len(pend) == 0 {
		return nil
	}
	done := 0
	for _, p := range pend { // bounded by the pending nodes (at most MaxReplicas)
		ok, err := a.opts.Decommissioned(ctx, p.name)
		if err != nil {
			return a.errorf(region, "is node %s decommissioned: %w", p.name, err)
		}
		if !ok {
			break
		}
		done++
	}
	var replicas int
	err := a.updateScale(ctx, region, func(cur int) (int, error) {
		if top := pend[0].ordinal; cur > top+1 {
			// Someone raised the StatefulSet above the drained nodes: a scale-down would now
			// delete pods that still hold data before reaching them.
			return 0, fmt.Errorf("spec.replicas is %d, above node %s being decommissioned (ordinal %d): "+
				"the StatefulSet was scaled up during a removal; scale it back to %d", cur, pend[0].name, top, top+1)
		}
		replicas = cur
		if done > 0 {
			replicas = min(cur, pend[done-1].ordinal)
		}
		return replicas, nil
	})
	if err != nil {
		return err
	}
	// Forget the nodes whose pods are gone (by this scale-down, or by someone else's).
	keep := pend[:0]
	for _, p := range pend {
		if p.ordinal < replicas {
			keep = append(keep, p)
		}
	}
	if len(keep) == 0 {
		delete(a.pending, region)
	} else {
		a.pending[region] = keep
	}
	return nil
}

// Add raises region's spec.replicas by n, up to MaxReplicas.
func (a *Actuator) Add(ctx context.Context, region string, n int) error {
	if region == "" {
		return errors.New("kube: empty region")
	}
	if n <= 0 {
		return a.errorf(region, "add %d nodes: the count must be positive", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if pend := a.pending[region]; len(pend) > 0 {
		return a.errorf(region, "add %d nodes: a removal is still pending (%d nodes being decommissioned, from %s); "+
			"new pods would sit above the drained ones", n, len(pend), pend[0].name)
	}
	return a.updateScale(ctx, region, func(cur int) (int, error) {
		if cur+n > a.opts.MaxReplicas {
			return 0, fmt.Errorf("add %d nodes to %d: above MaxReplicas %d", n, cur, a.opts.MaxReplicas)
		}
		return cur + n, nil
	})
}

// Remove decommissions region's n highest ordinals and records them pending; Nodes lowers
// spec.replicas once they are decommissioned. It refuses to leave fewer than one replica, and
// refuses while a previous removal in region is pending.
func (a *Actuator) Remove(ctx context.Context, region string, n int) error {
	if region == "" {
		return errors.New("kube: empty region")
	}
	if n <= 0 {
		return a.errorf(region, "remove %d nodes: the count must be positive", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if pend := a.pending[region]; len(pend) > 0 {
		return a.errorf(region, "remove %d nodes: a previous removal is still pending (%d nodes being decommissioned, from %s)",
			n, len(pend), pend[0].name)
	}
	name := a.opts.StatefulSet(region)
	sc, err := a.opts.Client.AppsV1().StatefulSets(a.opts.Namespace).GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		return a.errorf(region, "get scale of statefulset %s/%s: %w", a.opts.Namespace, name, err)
	}
	cur := int(sc.Spec.Replicas)
	if cur-n < 1 {
		return a.errorf(region, "remove %d nodes of %d: would leave fewer than 1 replica", n, cur)
	}
	// Decommission from the top, as the scale-down will remove pods; stop at the first
	// failure, keeping those started (still the highest ordinals) pending.
	var pend []pendingNode
	for ord := cur - 1; ord >= cur-n; ord-- { // n iterations
		node := a.opts.NodeName(name, ord)
		if err := a.opts.Decommission(ctx, node); err != nil {
			if len(pend) > 0 {
				a.pending[region] = pend
			}
			return a.errorf(region, "decommission node %s (%d of %d started): %w", node, len(pend), n, err)
		}
		pend = append(pend, pendingNode{ordinal: ord, name: node})
	}
	a.pending[region] = pend
	return nil
}

// updateScale sets region's spec.replicas to next(current) through the scale subresource,
// re-reading and retrying on a conflict. An error of next is returned as is (wrapped), not
// retried.
func (a *Actuator) updateScale(ctx context.Context, region string, next func(cur int) (int, error)) error {
	name := a.opts.StatefulSet(region)
	sets := a.opts.Client.AppsV1().StatefulSets(a.opts.Namespace)
	err := retry.RetryOnConflict(a.opts.Retry, func() error { // bounded by Retry.Steps
		sc, err := sets.GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get scale of statefulset %s/%s: %w", a.opts.Namespace, name, err)
		}
		cur := int(sc.Spec.Replicas)
		want, err := next(cur)
		if err != nil {
			return err
		}
		if want == cur {
			return nil
		}
		upd := &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: sc.Name, Namespace: sc.Namespace, ResourceVersion: sc.ResourceVersion},
			Spec:       autoscalingv1.ScaleSpec{Replicas: int32(want)},
		}
		if _, err := sets.UpdateScale(ctx, name, upd, metav1.UpdateOptions{}); err != nil {
			// Keep the API error's type visible to RetryOnConflict.
			return fmt.Errorf("scale statefulset %s/%s from %d to %d: %w", a.opts.Namespace, name, cur, want, err)
		}
		return nil
	})
	if err != nil {
		return a.errorf(region, "%w", err)
	}
	return nil
}

func (a *Actuator) errorf(region, format string, args ...any) error {
	return fmt.Errorf("kube: region %s: "+format, append([]any{region}, args...)...)
}
