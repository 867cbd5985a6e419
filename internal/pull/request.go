package pull

import (
	"errors"
	"net/url"
	"strings"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/validate"
)

// request is a validated Start: the URL and where the file goes.
type request struct {
	url       *url.URL
	dir       string   // cleaned, root-relative: "." or "plugins"
	filename  string   // plain name
	rel       string   // dir joined with filename
	directory string   // dir as the user sees it: "/" or "/plugins"
	sum       Checksum // the digest the file must have; zero: none (verify.go)
}

// parseRequest checks Start's input before anything is touched. Every
// issue found is reported, each at its field.
func parseRequest(rawURL, directory, filename string) (request, error) {
	var c validate.Collector
	var r request
	u, urlOK := parseURL(&c, rawURL)
	r.url = u
	dir, err := files.Clean("directory", directory)
	if err != nil {
		addIssues(&c, err)
	} else {
		r.dir, r.directory = dir, files.Display(dir)
	}
	switch {
	case filename != "":
		if err := plainName("filename", filename); err != nil {
			addIssues(&c, err)
		} else {
			r.filename = filename
		}
	case urlOK:
		name, ok := nameFromURL(u)
		if !ok {
			c.Add("filename", "is required when the url does not end in a usable file name")
		} else {
			r.filename = name
		}
	}
	if err := c.Err(); err != nil {
		return request{}, err
	}
	rel, err := files.Join("directory", r.dir, "filename", r.filename)
	if err != nil {
		return request{}, err
	}
	r.rel = rel
	return r, nil
}

// parseURL accepts absolute http and https URLs of at most MaxURLLen bytes
// with a host and without user information.
func parseURL(c *validate.Collector, raw string) (*url.URL, bool) {
	switch {
	case raw == "":
		c.Add("url", "is required")
		return nil, false
	case len(raw) > MaxURLLen:
		c.Add("url", "is longer than %d bytes", MaxURLLen)
		return nil, false
	}
	u, err := url.Parse(raw)
	if err != nil {
		c.Add("url", "is not a valid URL")
		return nil, false
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https": // Parse lowercases it
		c.Add("url", "must be an http or https URL")
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		c.Add("url", "must name a host")
	case u.User != nil:
		// Credentials would be stored, listed to the whole team and sent
		// again on every redirect; and "https://trusted@evil" misleads.
		c.Add("url", "must not contain a user name or password")
	default:
		return u, true
	}
	return nil, false
}

// nameFromURL is the last segment of the URL's path, decoded, when it is a
// usable plain name ("…/paper-1.21.jar?x=1" → "paper-1.21.jar").
func nameFromURL(u *url.URL) (string, bool) {
	// The segment is cut from the escaped path, so "a%2Fb" is one segment
	// (and then refused for its "/"), not "b".
	p := u.EscapedPath()
	name, err := url.PathUnescape(p[strings.LastIndexByte(p, '/')+1:])
	if err != nil || name == "" || plainName("filename", name) != nil {
		return "", false
	}
	return name, true
}

// plainName refuses anything but one file name: no "/", no "." or "..",
// no NUL, valid UTF-8, at most files.MaxNameLen bytes, and not a name
// Kiln uses for its own temporary files.
func plainName(field, name string) error {
	if strings.Contains(name, "/") {
		if _, err := files.Clean(field, name); err != nil {
			return err
		}
		return validate.Errorf(field, "must be a plain file name, without \"/\"")
	}
	c, err := files.Clean(field, name)
	if err != nil {
		return err
	}
	if c == "." {
		return validate.Errorf(field, "must be a file name")
	}
	return nil
}

// addIssues copies the issues of a *validate.Error into c.
func addIssues(c *validate.Collector, err error) {
	if ve, ok := errors.AsType[*validate.Error](err); ok {
		for _, i := range ve.Issues {
			c.Add(i.Path, "%s", i.Message)
		}
		return
	}
	c.Add("", "%s", err.Error())
}
