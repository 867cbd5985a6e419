package blob

import (
	"context"
	"errors"
	"net/url"
)

func openS3(ctx context.Context, u *url.URL, opts Options) (Store, error) {
	return nil, errors.New("open blob store: the s3 backend is not implemented yet")
}
