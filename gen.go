package runbox

// Regenerate the API code under gen/ (Go) and sdk/typescript/src/gen
// (TypeScript) from proto/ with the generators pinned in go.mod's tool lines
// and sdk/typescript/package-lock.json (run `npm ci` in sdk/typescript once).
//go:generate sh -c "test -e sdk/typescript/node_modules/@bufbuild/protoc-gen-es/bin/protoc-gen-es || { echo 'protoc-gen-es missing: run npm ci in sdk/typescript' >&2; exit 1; }"
//go:generate go tool buf generate
