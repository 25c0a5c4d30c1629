package server

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// listPage is one paged list call: the ids it returned and its token.
type listPage func(ctx context.Context, c themisv1.ThemisClient, size int32, token string) ([]string, string, error)

var pagedLists = []struct {
	name string
	list listPage
}{
	{"ListSessions", func(ctx context.Context, c themisv1.ThemisClient, size int32, token string) ([]string, string, error) {
		resp, err := c.ListSessions(ctx, &themisv1.ListSessionsRequest{All: true, PageSize: size, PageToken: token})
		var ids []string
		for _, s := range resp.GetSessions() {
			ids = append(ids, s.GetId())
		}
		return ids, resp.GetNextPageToken(), err
	}},
	{"ListFindings", func(ctx context.Context, c themisv1.ThemisClient, size int32, token string) ([]string, string, error) {
		resp, err := c.ListFindings(ctx, &themisv1.ListFindingsRequest{PageSize: size, PageToken: token})
		var ids []string
		for _, f := range resp.GetFindings() {
			ids = append(ids, f.GetId())
		}
		return ids, resp.GetNextPageToken(), err
	}},
}

// TestListPaging: the list RPCs return pages of page_size (default 100,
// clamped to 1000) with a token for the next, until all is listed once;
// a negative page_size or a token that is not one is InvalidArgument
// naming the field.
func TestListPaging(t *testing.T) {
	t.Parallel()
	const n = 5
	f := &fakeDomain{many: n}
	c := themisv1.NewThemisClient(serve(t, f))
	ctx := t.Context()
	for _, pl := range pagedLists {
		for _, size := range []int32{1, 2, 5, 0, 5000} {
			var got []string
			token, pages := "", 0
			for {
				ids, next, err := pl.list(ctx, c, size, token)
				if err != nil {
					t.Fatalf("%s size %d page %d: %v", pl.name, size, pages, err)
				}
				if size > 0 && len(ids) > int(size) {
					t.Errorf("%s size %d: a page of %d", pl.name, size, len(ids))
				}
				got, pages, token = append(got, ids...), pages+1, next
				if token == "" || pages > n+1 {
					break
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(manyIDs(pl.name, n)) {
				t.Errorf("%s size %d: listed %v, want %v", pl.name, size, got, manyIDs(pl.name, n))
			}
		}
		for _, bad := range []struct {
			size  int32
			token string
			field string
		}{{-1, "", "page_size"}, {0, "not a token", "page_token"}, {0, "e30", "page_token"}} {
			_, _, err := pl.list(ctx, c, bad.size, bad.token)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || badField(st) != bad.field {
				t.Errorf("%s size %d token %q: %v, want InvalidArgument naming %s", pl.name, bad.size, bad.token, err, bad.field)
			}
		}
	}
}

// manyIDs are the ids a fakeDomain with many set lists, oldest first.
func manyIDs(list string, n int) []string {
	prefix := "s-"
	if list == "ListFindings" {
		prefix = "f-"
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return out
}
