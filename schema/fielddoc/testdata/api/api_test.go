package api

// Test files are not part of the API.
type NotAPI struct{}
