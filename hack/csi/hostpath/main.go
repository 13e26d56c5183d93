// rkube-csi-hostpath: a small host-path CSI driver to test the kubelet's
// CSI support with (upstream's csi-driver-host-path is not on the Go
// module proxy). Volumes are directories on the node:
//
//	<state-dir>/<node>/<volume id>
//
// Controller: CreateVolume makes the directory on the node the topology
// asks for (WaitForFirstConsumer: the node the scheduler chose) and
// DeleteVolume removes it; ControllerPublishVolume "attaches" a volume
// only to the node it is on (its publish context names the node). Node: NodeStageVolume bind-mounts the directory
// on the staging path, NodePublishVolume bind-mounts the staging path on
// the target (read-only when asked), the Unstage/Unpublish calls undo them,
// NodeGetVolumeStats reads statfs. It also serves the kubelet's plugin
// registration socket itself (what node-driver-registrar does for other
// drivers) when --registration-dir is set.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	name, node, stateDir, topologyKey string
	controller                        bool
	mu                                sync.Mutex
}

func main() {
	var (
		endpoint = flag.String("endpoint", "", "the CSI socket (a path)")
		regDir   = flag.String("registration-dir", "", "the kubelet's plugins_registry (empty: no registration socket)")
		d        driver
	)
	flag.StringVar(&d.name, "driver-name", "hostpath.csi.rkube.dev", "the driver's name")
	flag.StringVar(&d.node, "node-id", "", "this node's name (node service)")
	flag.StringVar(&d.stateDir, "state-dir", "", "where volumes are made")
	flag.StringVar(&d.topologyKey, "topology-key", "topology.hostpath.csi.rkube.dev/node", "the topology key")
	flag.BoolVar(&d.controller, "controller", false, "serve the controller service")
	flag.Parse()
	if *endpoint == "" || d.stateDir == "" {
		log.Fatal("--endpoint and --state-dir are required")
	}
	if !d.controller && d.node == "" {
		log.Fatal("--node-id is required for the node service")
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, &d)
	if d.controller {
		csi.RegisterControllerServer(srv, &d)
	}
	if d.node != "" {
		csi.RegisterNodeServer(srv, &d)
	}
	lis := listen(*endpoint)
	go func() { log.Fatal(srv.Serve(lis)) }()
	var reg *grpc.Server
	if *regDir != "" {
		reg = grpc.NewServer()
		registerapi.RegisterRegistrationServer(reg, &registration{name: d.name, endpoint: *endpoint})
		regLis := listen(filepath.Join(*regDir, d.name+"-reg.sock"))
		go func() { log.Fatal(reg.Serve(regLis)) }()
	}
	log.Printf("%s serving on %s (controller=%v node=%q)", d.name, *endpoint, d.controller, d.node)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	if reg != nil {
		reg.Stop()
		_ = os.Remove(filepath.Join(*regDir, d.name+"-reg.sock"))
	}
	srv.Stop()
	_ = os.Remove(*endpoint)
}

func listen(path string) net.Listener {
	_ = os.Remove(path)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		log.Fatal(err)
	}
	return l
}

// ---- registration (the kubelet's pluginregistration API) ----------------

type registration struct {
	registerapi.UnimplementedRegistrationServer
	name, endpoint string
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.name,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		log.Printf("registration refused by the kubelet: %s", s.Error)
	} else {
		log.Printf("registered with the kubelet")
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// ---- identity ---------------------------------------------------------------

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.name, VendorVersion: "0.1.0"}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	caps := []csi.PluginCapability_Service_Type{csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}
	if d.controller {
		caps = append(caps, csi.PluginCapability_Service_CONTROLLER_SERVICE)
	}
	var out []*csi.PluginCapability
	for _, c := range caps {
		out = append(out, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: c}}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: out}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// ---- controller ---------------------------------------------------------------

func volumeID(name string) string {
	return fmt.Sprintf("vol-%x", sha256.Sum256([]byte(name)))[:20]
}

// safeName refuses what would leave the state directory.
func safeName(s string) error {
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00") {
		return status.Errorf(codes.InvalidArgument, "invalid name %q", s)
	}
	return nil
}

func (d *driver) nodeOf(req *csi.CreateVolumeRequest) (string, error) {
	ar := req.GetAccessibilityRequirements()
	for _, t := range append(ar.GetPreferred(), ar.GetRequisite()...) {
		if n := t.GetSegments()[d.topologyKey]; n != "" {
			return n, nil
		}
	}
	return "", status.Error(codes.InvalidArgument, "no node in the accessibility requirements (use WaitForFirstConsumer)")
}

func (d *driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	for _, c := range req.GetVolumeCapabilities() {
		if c.GetBlock() != nil {
			return nil, status.Error(codes.InvalidArgument, "block volumes are not supported")
		}
	}
	node, err := d.nodeOf(req)
	if err != nil {
		return nil, err
	}
	if err := safeName(node); err != nil {
		return nil, err
	}
	id := volumeID(req.GetName())
	d.mu.Lock()
	defer d.mu.Unlock()
	dir := filepath.Join(d.stateDir, node, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           id,
		CapacityBytes:      req.GetCapacityRange().GetRequiredBytes(),
		VolumeContext:      map[string]string{"node": node},
		AccessibleTopology: []*csi.Topology{{Segments: map[string]string{d.topologyKey: node}}},
	}}, nil
}

func (d *driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if err := safeName(req.GetVolumeId()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	dirs, _ := filepath.Glob(filepath.Join(d.stateDir, "*", req.GetVolumeId()))
	for _, dir := range dirs {
		if err := os.RemoveAll(dir); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(),
	}}, nil
}

func (d *driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var out []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME} {
		out = append(out, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: out}, nil
}

// ControllerPublishVolume "attaches" a volume to a node: it must be on
// that node; the publish context names it, so the node can check it was
// passed on.
func (d *driver) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if err := safeName(req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := safeName(req.GetNodeId()); err != nil {
		return nil, err
	}
	if st, err := os.Stat(filepath.Join(d.stateDir, req.GetNodeId(), req.GetVolumeId())); err != nil || !st.IsDir() {
		return nil, status.Errorf(codes.NotFound, "volume %s is not on node %s", req.GetVolumeId(), req.GetNodeId())
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"attachedTo": req.GetNodeId()}}, nil
}

func (d *driver) ControllerUnpublishVolume(context.Context, *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// ---- node -----------------------------------------------------------------

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             d.node,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{d.topologyKey: d.node}},
	}, nil
}

func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var out []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, csi.NodeServiceCapability_RPC_GET_VOLUME_STATS} {
		out = append(out, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: out}, nil
}

func (d *driver) volumeDir(id string) (string, error) {
	if err := safeName(id); err != nil {
		return "", err
	}
	dir := filepath.Join(d.stateDir, d.node, id)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", status.Errorf(codes.NotFound, "volume %s is not on node %s", id, d.node)
	}
	return dir, nil
}

func mounted(path string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.ReplaceAll(f[4], `\040`, " ") == path {
			return true
		}
	}
	return false
}

func bind(source, target string, readOnly bool) error {
	if mounted(target) {
		return nil
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return status.Errorf(codes.Internal, "bind mount %s on %s: %v", source, target, err)
	}
	if readOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return status.Errorf(codes.Internal, "read-only remount of %s: %v", target, err)
		}
	}
	return nil
}

func unbind(target string) error {
	for mounted(target) {
		if err := unix.Unmount(target, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return status.Errorf(codes.Internal, "unmount %s: %v", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

func (d *driver) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if req.GetStagingTargetPath() == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "staging path and capability are required")
	}
	dir, err := d.volumeDir(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if err := bind(dir, req.GetStagingTargetPath(), false); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (d *driver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "staging path is required")
	}
	if err := unbind(req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetTargetPath() == "" || req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "target and staging paths are required")
	}
	if !mounted(req.GetStagingTargetPath()) {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", req.GetVolumeId(), req.GetStagingTargetPath())
	}
	if to, ok := req.GetPublishContext()["attachedTo"]; ok && to != d.node {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is attached to %s, not %s", req.GetVolumeId(), to, d.node)
	}
	if err := bind(req.GetStagingTargetPath(), req.GetTargetPath(), req.GetReadonly()); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	}
	if err := unbind(req.GetTargetPath()); err != nil {
		return nil, err
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (d *driver) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(req.GetVolumePath(), &st); err != nil {
		return nil, status.Errorf(codes.NotFound, "%s: %v", req.GetVolumePath(), err)
	}
	bs := int64(st.Bsize)
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}
