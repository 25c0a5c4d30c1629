package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
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

// exempt says whether method needs no token: the health service's.
func exempt(method string) bool {
	return strings.HasPrefix(method, "/"+healthpb.Health_ServiceDesc.ServiceName+"/")
}

// check checks the authorization header in md for a call of method.
func (a *tokenAuth) check(md metadata.MD, method string) error {
	if exempt(method) {
		return nil
	}
	return a.checkMD(md)
}

// checkMD checks the authorization header in md.
func (a *tokenAuth) checkMD(md metadata.MD) error {
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return status.Error(codes.Unauthenticated, "missing authorization: Bearer token")
	}
	return a.checkHeader(vals[0])
}

// checkHeader checks one authorization header value: "Bearer <token>".
func (a *tokenAuth) checkHeader(v string) error {
	scheme, tok, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return status.Error(codes.Unauthenticated, "authorization: want \"Bearer <token>\"")
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if subtle.ConstantTimeCompare(sum[:], a.sum[:]) != 1 {
		return status.Error(codes.Unauthenticated, "invalid token")
	}
	return nil
}

// tap is the grpc.InTapHandle: it checks the token on the headers, before
// the server reads, let alone decodes, the request, so that a caller
// without the token costs no more than its headers. It is the only token
// check of the gRPC API (no interceptor repeats it); a refused call never
// reaches the interceptors, so it is not counted in
// themis_grpc_requests_total.
func (a *tokenAuth) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if err := a.check(info.Header, info.FullMethodName); err != nil {
		return nil, err
	}
	return ctx, nil
}

// boundUnauth is a stream interceptor for a daemon that authenticates by
// token only: a stream of an exempt method (Health/Watch) opened without
// the token ends after limit with DEADLINE_EXCEEDED, so that anyone who
// reaches the port cannot hold streams (and their connections) open for
// good. With the token it is not bounded.
func (a *tokenAuth) boundUnauth(limit time.Duration) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if !exempt(info.FullMethod) || a.checkMD(md) == nil {
			return h(srv, ss)
		}
		ctx, cancel := context.WithTimeout(ss.Context(), limit)
		defer cancel()
		err := h(srv, ctxStream{ServerStream: ss, ctx: ctx})
		if ss.Context().Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return status.Errorf(codes.DeadlineExceeded, "%s: a stream without the token is closed after %v", info.FullMethod, limit)
		}
		return err
	}
}

// ctxStream is a grpc.ServerStream with a context of its own.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context implements grpc.ServerStream.
func (s ctxStream) Context() context.Context { return s.ctx }

// http wraps h (the metrics endpoint over TLS) in the same bearer token
// check; a request without it gets 401.
func (a *tokenAuth) http(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		v := req.Header.Get("Authorization")
		if v == "" || a.checkHeader(v) != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="themisd"`)
			http.Error(w, "unauthorized: want authorization: Bearer <token>", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// noToken wraps h (the metrics endpoint over plain HTTP, on loopback only)
// so that a request carrying an Authorization header is refused (400):
// the token never counts in cleartext, and a scraper that sends it learns
// that it did.
func noToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Authorization") != "" {
			http.Error(w, "authorization is not accepted over plain HTTP: /metrics on loopback needs none", http.StatusBadRequest)
			return
		}
		h.ServeHTTP(w, req)
	})
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
