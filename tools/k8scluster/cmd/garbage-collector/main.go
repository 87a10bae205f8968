// Command garbage-collector runs Kubernetes' garbage collector
// (k8s.io/kubernetes/pkg/controller/garbagecollector) against the cluster
// its --kubeconfig names, wired as kube-controller-manager wires it: a
// shared and a metadata informer factory, a discovery REST mapper reset
// every 30 seconds, and a resync of the monitored resources every 30
// seconds.
//
// The cluster tier (internal/k8stest) needs only this controller: it
// deletes what an owner's deletion leaves, as a Sandbox's Pod. It ran
// `kube-controller-manager --controllers=garbagecollector` before, whose
// other controllers, volume plugins and cAdvisor were about a seventh of
// the code scripts/k8s-tools.sh compiles on a new machine, for nothing.
// The controller's code is upstream's, unchanged; only this wiring is
// ours, and it is what kube-controller-manager does for the controller.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
)

// workers is kube-controller-manager's default --concurrent-gc-syncs.
const workers = 20

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to the kubeconfig of the cluster")
	klog.InitFlags(nil)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "garbage-collector:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig string) error {
	if kubeconfig == "" {
		return fmt.Errorf("--kubeconfig is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// The mapper has its own discovery client: Sync resets the mapper when
	// discovery changes, and must not reset the client it reads from.
	mapperDiscovery, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(mapperDiscovery.Discovery()))
	go wait.Until(mapper.Reset, 30*time.Second, ctx.Done())

	shared := informers.NewSharedInformerFactory(client, 0)
	metaShared := metadatainformer.NewSharedInformerFactory(meta, 0)
	started := make(chan struct{})
	gc, err := garbagecollector.NewGarbageCollector(ctx, client, meta, mapper,
		garbagecollector.DefaultIgnoredResources(), informerfactory.NewInformerFactory(shared, metaShared), started)
	if err != nil {
		return err
	}
	shared.Start(ctx.Done())
	metaShared.Start(ctx.Done())
	close(started)
	go gc.Run(ctx, workers)
	gc.Sync(ctx, client.Discovery(), 30*time.Second)
	return nil
}
