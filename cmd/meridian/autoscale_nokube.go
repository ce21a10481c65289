//go:build !kubernetes

package main

import (
	"fmt"

	"meridian/internal/autoscale"
	"meridian/internal/autoscale/actuate"
)

// kubeActuator: this binary was built without the Kubernetes client (client-go is large and
// only Kubernetes deployments need it).
func kubeActuator(autoscaleFlags, actuate.Admin) (autoscale.Actuator, error) {
	return nil, fmt.Errorf("this meridian binary was built without Kubernetes support: build it with `go build -tags pebblegozstd,kubernetes ./cmd/meridian`")
}
