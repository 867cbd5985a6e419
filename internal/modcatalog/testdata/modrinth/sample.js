// Regenerates the Modrinth fixtures of this directory from Modrinth's
// published OpenAPI document (see ../README.md). Run with Node.js:
//
//   npm install openapi-sampler@1.7.10 js-yaml@4
//   git -C modrinth-code show fe9ae94a5d9ac1e9d37c3088c9cdca1f55b5a61f:apps/docs/public/openapi.yaml > openapi.yaml
//   node sample.js openapi.yaml
//
// openapi-sampler is the generator Redoc uses for the "Response samples"
// of an API reference: it takes each property's published `example`,
// else its default, else the first enum value, else a placeholder of its
// type ("string", 0, true).
const fs = require('fs'), yaml = require('js-yaml'), sampler = require('openapi-sampler');
const spec = yaml.load(fs.readFileSync(process.argv[2], 'utf8'));
const sample = (path) => sampler.sample(
  spec.paths[path].get.responses['200'].content['application/json'].schema,
  { skipReadOnly: false, skipNonRequired: false }, spec);
for (const [file, path] of [
  ['search.json', '/search'],
  ['versions.json', '/project/{id|slug}/version'],
  ['version.json', '/version/{id}'],
  ['project.json', '/project/{id|slug}'],
]) fs.writeFileSync(file, JSON.stringify(sample(path), null, 2) + '\n');
