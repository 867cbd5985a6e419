// Package validate holds the one validation error type that every domain
// package returns when input breaks its rules: a list of issues, each with a
// dotted path ("servers.lobby.memory", "files[1].to") and a sentence.
//
// It knows nothing of HTTP; internal/api turns an *Error into
// 400 VALIDATION_ERROR with the issues in the body.
package validate
