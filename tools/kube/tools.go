//go:build tools

// Package tools pins, for go mod tidy, the packages the four binaries are built from: main
// packages cannot be imported, so their app packages are (build.sh builds the mains).
package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubectl/pkg/cmd"
)
