package server

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/vmm"
)

// toStatus maps a domain or validation error to a gRPC status error. It is
// the only place error kinds become codes:
//
//	errkind.ErrInvalid   -> InvalidArgument (with a BadRequest detail naming the field)
//	errkind.ErrNotFound  -> NotFound
//	errkind.ErrState     -> FailedPrecondition
//	errkind.ErrExhausted, scratch.ErrNoRoom -> ResourceExhausted
//	context.DeadlineExceeded -> DeadlineExceeded
//	context.Canceled     -> Canceled
//	anything else        -> Internal
//
// The message is always err.Error(), which for bad input starts with the field.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var code codes.Code
	switch {
	case errors.Is(err, errkind.ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, errkind.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, errkind.ErrState):
		code = codes.FailedPrecondition
	case errors.Is(err, errkind.ErrExhausted), errors.Is(err, scratch.ErrNoRoom):
		code = codes.ResourceExhausted
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	default:
		// A gRPC status below (a failed stream send) keeps its code.
		code = codes.Internal
		if st, ok := status.FromError(err); ok {
			code = st.Code()
		}
	}
	st := status.New(code, err.Error())
	var fe *errkind.FieldError
	if code == codes.InvalidArgument && errors.As(err, &fe) {
		withDetail, derr := st.WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: fe.Field, Description: fe.Msg}},
		})
		if derr == nil {
			st = withDetail
		}
	}
	return withKernelReport(st, err).Err()
}

// withKernelReport attaches the kernel report of a guest that died (a
// vmm.GuestDiedError whose console holds one) to st's details, for a
// client to read without parsing the message.
func withKernelReport(st *status.Status, err error) *status.Status {
	var gd *vmm.GuestDiedError
	if !errors.As(err, &gd) {
		return st
	}
	r, ok := kreport.Parse(gd.Console)
	if !ok {
		return st
	}
	withDetail, derr := st.WithDetails(kernelReportProto(r))
	if derr != nil {
		return st
	}
	return withDetail
}
