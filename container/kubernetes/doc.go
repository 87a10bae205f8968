// Package kubernetes is the Kubernetes engine's object side: the sealed
// worker's Pod built from a container.Spec (pod.go), the NetworkPolicy
// that leaves a worker nothing but the broker (policy.go), the objects of
// an agent-sandbox warm pool (sandbox.go), and the Pod lifecycle the
// engine drives through client-go (lifecycle.go): create, wait until the
// worker runs (by a watch, never a poll), delete by exact name until the
// API reports it gone, reap by the installation's labels, and follow a
// running Pod so that a failure, eviction or deletion is heard at once.
//
// Two engines are built on it: Sealed, the container.OneShot of the
// sealed mode (one fresh Pod per turn, sealed.go), and Sessions, the
// container.LongLived of the session mode (session.go): one long-lived
// Pod per channel (SessionPod, session_pod.go), the same worker image
// with the command "session" under the same seal, restartPolicy Always.
// A channel's run directory and workspace live on one operator-provided
// PersistentVolumeClaim (Options.SessionClaim) that the host sees at
// Options.SessionRoot; the Pod mounts the two by subPath, the run
// directory read-only, so the conversation outlives the Pod and, on a
// ReadWriteMany claim, its node. The worker reaches the broker over the
// network through the hello file the host writes into the run directory
// (SessionBroker): the Pod holds no token. The Pod is kept while it runs
// and matches its spec's digest (container.SpecLabel's annotation) and
// the engine's own (EngineAnnotation: a change of the claim, root,
// broker, runtime classes or ephemeral bound recreates it), and deleted
// with a short grace period, so that a Pod the engine deleted is gone only
// once its node stopped the worker, and no second worker starts on the
// channel's workspace meanwhile (a deletion forced by someone else is
// beyond the engine).
//
// The contract is container's (docs/engines.md, "The guarantees, and how
// each engine keeps them"); what a Pod cannot express as Docker does is
// stated where it is built (pod.go, session_pod.go) and in
// docs/kubernetes.md:
//
//   - the seal: non-root (runAsUser/runAsGroup from the spec, runAsNonRoot),
//     a read-only root, every capability dropped, no privilege escalation,
//     seccomp RuntimeDefault, no service-account token, no service links,
//     no host namespaces, imagePullPolicy Never (the engine never pulls),
//     the spec's RuntimeClass (gVisor for runsc), memory and CPU limits
//     equal to their requests, a bounded ephemeral storage, /tmp and the
//     sealed workspace as memory-backed emptyDirs of the spec's sizes;
//   - the turn's input and the broker's token reach the worker on its
//     stdin (the attach subresource, which the API server authenticates
//     by RBAC), never in its environment, labels, annotations or volumes:
//     a warm Pod of a SandboxWarmPool is a copy of one template made
//     before any turn, so nothing of a turn can be in its spec;
//   - every object carries container.InstallationLabel and
//     container.RoleLabel, and Reap selects by exactly those: the sealed
//     reaper (container.RoleTurn) never deletes a channel's Pod
//     (container.RoleSession), which Sessions.ReapSessions and ReapStrays
//     alone delete.
//
// Built with client-go's typed clients and agent-sandbox's generated
// types; nothing here speaks REST by hand.
package kubernetes
