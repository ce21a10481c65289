//go:build kubernetes

package main

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"meridian/internal/autoscale"
	"meridian/internal/autoscale/actuate"
	"meridian/internal/autoscale/kube"
	"meridian/internal/metadata"
)

// kubeActuator scales one StatefulSet per region (internal/autoscale/kube); nodes are
// decommissioned through the admin API before their pods go.
func kubeActuator(f autoscaleFlags, admin actuate.Admin) (autoscale.Actuator, error) {
	var rc *rest.Config
	var err error
	if f.kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes configuration: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return kube.New(kube.Options{
		Client: cs, Namespace: f.namespace,
		StatefulSet: func(region string) string { return f.stsPrefix + region },
		Decommission: func(ctx context.Context, node string) error {
			_, err := admin.SetNodeState(ctx, node, metadata.NodeDecommissioning)
			return err
		},
		Decommissioned: func(ctx context.Context, node string) (bool, error) {
			st, err := admin.ClusterStatus(ctx)
			if err != nil {
				return false, err
			}
			for _, n := range st.GetNodes() {
				if n.GetName() == node {
					return n.GetState() == metadata.NodeRemoved, nil
				}
			}
			return true, nil // gone from the membership
		},
	})
}
