// Command crireset stops and removes every container and pod sandbox of a
// CRI runtime: the test cluster's private containerd, after its kubelet has
// stopped. Going through CRI (not ctr) lets containerd tear each pod down as
// kubelet would: CNI DEL (the pod's veth and address), the pod's network
// namespace, its mounts.
//
//	crireset [-timeout 60s] /path/to/containerd.sock
//
// It prints what it removed on stderr and exits 1 if anything is left.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	timeout := flag.Duration("timeout", 60*time.Second, "bound on the whole reset")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: crireset [-timeout 60s] SOCKET")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := reset(ctx, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "crireset:", err)
		os.Exit(1)
	}
}

func reset(ctx context.Context, socket string) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", socket, err)
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)

	cs, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, c := range cs.Containers {
		if _, err := rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.Id, Timeout: 0}); err != nil {
			return fmt.Errorf("stop container %s (%s): %w", c.Id, c.GetMetadata().GetName(), err)
		}
		if _, err := rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.Id}); err != nil {
			return fmt.Errorf("remove container %s (%s): %w", c.Id, c.GetMetadata().GetName(), err)
		}
	}
	ps, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	for _, p := range ps.Items {
		name := p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName()
		if _, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			return fmt.Errorf("stop pod sandbox %s (%s): %w", p.Id, name, err)
		}
		if _, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			return fmt.Errorf("remove pod sandbox %s (%s): %w", p.Id, name, err)
		}
	}
	fmt.Fprintf(os.Stderr, "crireset: removed %d containers and %d pod sandboxes\n", len(cs.Containers), len(ps.Items))

	cs, err = rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	ps, err = rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	if n, m := len(cs.Containers), len(ps.Items); n+m != 0 {
		return fmt.Errorf("%d containers and %d pod sandboxes are still there", n, m)
	}
	return nil
}
