//go:build !debdeps

package main

import "errors"

// errNoDebWriter says why this build cannot write packages: go.mod lacks
// the modules of nfpm's deb writer; see the comment at the top of deb.go.
var errNoDebWriter = errors.New("built without the .deb writer: go.mod lacks github.com/blakesmith/ar and " +
	"github.com/ulikunitz/xz, which nfpm's deb package needs; run " +
	"`go get github.com/goreleaser/nfpm/v2/deb@v2.45.2`, then delete packaging/cmd/mkdeb/deb_missing.go " +
	"and the build constraint in deb.go (until then: go run -modfile=ALT.mod -tags debdeps)")

func writeDeb(options, map[string]string, []doc, string) (string, error) { return "", errNoDebWriter }
