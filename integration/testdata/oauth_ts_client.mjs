// An MCP client on the official TypeScript SDK that signs in with OAuth as
// an MCP host does: given only the endpoint's URL, it lets the SDK discover
// the authorization server, register (or use its Client ID Metadata
// Document), and send the user to the authorization page; the test drives
// that page in a browser, which comes back to this script's loopback
// redirect URI (RFC 8252). Then it lists and calls tools, waits out its
// access token and calls again, which makes the SDK refresh it.
//
// It speaks to the test in JSON lines on stdout: {"kind": ...}.
//
//   node oauth_ts_client.mjs NODE_MODULES ENDPOINT [CLIENT_METADATA_URL]
//
// NODE_MODULES holds @modelcontextprotocol/sdk; CLIENT_METADATA_URL, if
// given, is the client's metadata document, used instead of registering.
import http from 'node:http';
import { createRequire } from 'node:module';

const [modules, endpointArg, metadataUrl] = process.argv.slice(2);
const require = createRequire(modules + '/');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { UnauthorizedError } = require('@modelcontextprotocol/sdk/client/auth.js');

const say = (kind, data = {}) => console.log(JSON.stringify({ kind, ...data }));

// The loopback server the browser is sent back to.
let redirected;
const callback = new Promise((resolve) => { redirected = resolve; });
const server = http.createServer((req, res) => {
  const u = new URL(req.url, 'http://127.0.0.1');
  res.setHeader('Content-Type', 'text/plain');
  res.end('Signed in. You can close this window.');
  redirected(u.searchParams);
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const redirectUrl = `http://127.0.0.1:${server.address().port}/callback`;

let clientInfo, tokens, verifier;
const accessTokens = [];
const provider = {
  get redirectUrl() { return redirectUrl; },
  clientMetadataUrl: metadataUrl || undefined,
  get clientMetadata() {
    return {
      client_name: 'TS SDK test client',
      redirect_uris: [redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  },
  clientInformation() { return clientInfo; },
  saveClientInformation(info) { clientInfo = info; say('client', { client_id: info.client_id }); },
  tokens() { return tokens; },
  saveTokens(t) {
    tokens = t;
    accessTokens.push(t.access_token);
    say('tokens', { count: accessTokens.length, expires_in: t.expires_in, refresh: Boolean(t.refresh_token) });
  },
  redirectToAuthorization(url) { say('authorize', { url: url.toString() }); },
  saveCodeVerifier(v) { verifier = v; },
  codeVerifier() { return verifier; },
};

const endpoint = new URL(endpointArg);
const client = new Client({ name: 'toolbus-ts-oauth-test', version: '1.0.0' });
try {
  await client.connect(new StreamableHTTPClientTransport(endpoint, { authProvider: provider }));
} catch (err) {
  if (!(err instanceof UnauthorizedError)) throw err;
  const params = await callback;
  if (params.get('error')) throw new Error(`authorization refused: ${params.get('error')}: ${params.get('error_description')}`);
  const transport = new StreamableHTTPClientTransport(endpoint, { authProvider: provider });
  await transport.finishAuth(params.get('code'));
  await client.connect(transport);
}
const { tools } = await client.listTools();
say('tools', { names: tools.map((t) => t.name) });
const call = async (text) => {
  const res = await client.callTool({ name: 'echo', arguments: { text } });
  say('call', { text: res.content[0].text, isError: Boolean(res.isError) });
};
await call('from the TypeScript SDK');

// The access token's lifetime is the scenario, not a guess at timing:
// once it is over, the next call gets 401 and the SDK refreshes.
await new Promise((resolve) => setTimeout(resolve, (tokens.expires_in + 1) * 1000));
await call('after the refresh');
say('done', { tokens: accessTokens.length, distinct: new Set(accessTokens).size });
await client.close();
server.close();
