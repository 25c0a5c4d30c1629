package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// tokenAuth checks "authorization: Bearer <token>" on every call except the
// health service (probes cannot always send headers, and health says nothing
// about sessions). Comparison is constant-time over SHA-256 digests, so
// neither the token's bytes nor its length leak through timing.
type tokenAuth struct {
	sum [sha256.Size]byte
}

// readToken reads a token file: the token is its content with surrounding
// white space removed, and must not be empty.
func readToken(path string) (*tokenAuth, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token_file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return nil, fmt.Errorf("token_file: %s is empty", path)
	}
	return &tokenAuth{sum: sha256.Sum256([]byte(tok))}, nil
}

func (a *tokenAuth) check(ctx context.Context, method string) error {
	if strings.HasPrefix(method, "/"+healthpb.Health_ServiceDesc.ServiceName+"/") {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return status.Error(codes.Unauthenticated, "missing authorization: Bearer token")
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return status.Error(codes.Unauthenticated, "authorization: want \"Bearer <token>\"")
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if subtle.ConstantTimeCompare(sum[:], a.sum[:]) != 1 {
		return status.Error(codes.Unauthenticated, "invalid token")
	}
	return nil
}

func (a *tokenAuth) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (a *tokenAuth) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := a.check(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// recoverer turns a panic in a handler into Internal instead of taking the
// daemon (and every guest) down with it.
type recoverer struct{ log *zap.Logger }

func (r recoverer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer r.recover(info.FullMethod, &err)
	return h(ctx, req)
}

func (r recoverer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer r.recover(info.FullMethod, &err)
	return h(srv, ss)
}

func (r recoverer) recover(method string, err *error) {
	if p := recover(); p != nil {
		r.log.Error("handler panic", zap.String("method", method), zap.Any("panic", p),
			zap.ByteString("stack", debug.Stack()))
		*err = status.Errorf(codes.Internal, "%s: internal error (panic): %v", method, p)
	}
}
