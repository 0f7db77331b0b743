// A real OAuth 2.1 authorization server (panva's oidc-provider) for the integration tests.
//
//   node tests/integration/servers/oidc_provider.mjs --port PORT --resource URL \
//        --alg RS256|ES256 --kid KID [--issuer-path /some/path] [--lenient-scopes]
//        [--exit-on-stdin-eof]
//
// Client credentials grant only; resource indicators (RFC 8707) give JWT access tokens
// (RFC 9068, typ at+jwt) whose aud is the requested resource. The signing key is made
// fresh at every start, so restarting on the same port with another --kid/--alg is a
// key rotation under an unchanged issuer. Once listening it prints one JSON line:
// {"issuer", "port", "jwks_uri", "token_endpoint"}.
//
// Scopes: by default a client asking for a scope it is not registered for gets
// invalid_scope. With --lenient-scopes such scopes are dropped from the grant instead
// (and openid/offline_access are tolerated), as many production servers do.

import { createPrivateKey, generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    resource: { type: 'string' },
    alg: { type: 'string', default: 'RS256' },
    kid: { type: 'string', default: 'k1' },
    'issuer-path': { type: 'string', default: '' },
    'lenient-scopes': { type: 'boolean', default: false },
    // Exit when stdin closes, so a test run that dies leaves no provider behind.
    'exit-on-stdin-eof': { type: 'boolean', default: false },
  },
});

if (!args.resource) {
  console.error('--resource is required');
  process.exit(2);
}
if (!['RS256', 'ES256'].includes(args.alg)) {
  console.error(`--alg must be RS256 or ES256, not ${args.alg}`);
  process.exit(2);
}
let prefix = args['issuer-path'].replace(/\/+$/, '');
if (prefix && !prefix.startsWith('/')) prefix = `/${prefix}`;

// oidc-provider 9 asks for Node 22 LTS at import time; it runs fine on the Node 20 we
// have (20.18+ has URL.parse), so that one notice is dropped to keep stderr quiet.
const warn = console.warn;
console.warn = (msg, ...rest) => {
  if (typeof msg === 'string' && msg.includes('Unsupported runtime')) return;
  warn(msg, ...rest);
};
// The package lives in tests/js/node_modules; ESM ignores NODE_PATH, so import by path.
const { default: Provider, errors } = await import(
  new URL('../../js/node_modules/oidc-provider/lib/index.js', import.meta.url)
);
console.warn = warn;

const RESOURCE_SCOPES = ['execute', 'tools:read', 'workspace:read', 'workspace:write', 'skills:write', 'admin'];
const FULL = 'execute tools:read workspace:read workspace:write skills:write';
const CLIENTS = {
  alice: FULL,
  bob: FULL,
  carol: FULL,
  reader: 'tools:read',
  shortlived: FULL,
};
const RESOURCES = new Set([args.resource, 'https://other.invalid/mcp']);
const lenient = args['lenient-scopes'];

function signingJwk(alg, kid) {
  // Generated as PEM and read back: exporting the generated KeyObject as a JWK can deadlock
  // Node 20 (a garbage collection during the export runs the finished key job's destructor,
  // which takes the lock the export holds).
  const pem = { publicKeyEncoding: { type: 'spki', format: 'pem' }, privateKeyEncoding: { type: 'pkcs8', format: 'pem' } };
  const { privateKey } = alg === 'ES256'
    ? generateKeyPairSync('ec', { namedCurve: 'P-256', ...pem })
    : generateKeyPairSync('rsa', { modulusLength: 2048, ...pem });
  return { ...createPrivateKey(privateKey).export({ format: 'jwk' }), kid, alg, use: 'sig' };
}

// A plain in-memory adapter (the built-in one is fine too, but warns that it is dev-only).
const stores = new Map();
class MemoryAdapter {
  constructor(name) {
    if (!stores.has(name)) stores.set(name, new Map());
    this.store = stores.get(name);
  }

  async upsert(id, payload, expiresIn) {
    this.store.set(id, { payload, expires: expiresIn ? Date.now() + expiresIn * 1000 : Infinity });
  }

  async find(id) {
    const hit = this.store.get(id);
    if (!hit) return undefined;
    if (hit.expires < Date.now()) {
      this.store.delete(id);
      return undefined;
    }
    return hit.payload;
  }

  async findByUserCode() { return undefined; }

  async findByUid() { return undefined; }

  async consume(id) {
    const hit = this.store.get(id);
    if (hit) hit.payload.consumed = Math.floor(Date.now() / 1000);
  }

  async destroy(id) { this.store.delete(id); }

  async revokeByGrantId() {}
}

// The port is known only once listening, and the issuer needs it: listen first.
const server = createServer();
await new Promise((resolve, reject) => {
  server.once('error', reject);
  server.listen(Number(args.port), '127.0.0.1', resolve);
});
const { port } = server.address();
const issuer = `http://127.0.0.1:${port}${prefix}`;

const provider = new Provider(issuer, {
  adapter: MemoryAdapter,
  jwks: { keys: [signingJwk(args.alg, args.kid)] },
  clients: Object.entries(CLIENTS).map(([id, scope]) => ({
    client_id: id,
    client_secret: `${id}-secret`,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic', // client_secret_post is accepted too
    // Strict: the registered scope is an allow-list the grant enforces (invalid_scope).
    // Lenient: no allow-list here; getResourceServerInfo narrows the grant instead.
    ...(lenient ? {} : { scope }),
  })),
  clientDefaults: {
    grant_types: ['client_credentials'],
    response_types: [],
    id_token_signed_response_alg: args.alg,
  },
  // Strict: resource scopes are also "static" scopes, which is what makes oidc-provider
  // check them against the client's registered `scope` (else it ignores unknown ones).
  scopes: lenient ? ['openid', 'offline_access'] : ['openid', 'offline_access', ...RESOURCE_SCOPES],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: false },
    revocation: { enabled: false },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => false,
      getResourceServerInfo(ctx, resourceIndicator, client) {
        if (!RESOURCES.has(resourceIndicator)) {
          throw new errors.InvalidTarget(`unknown resource ${resourceIndicator}`);
        }
        // The grant is the requested scopes filtered by this list.
        const allowed = new Set(CLIENTS[client.clientId]?.split(' '));
        return {
          audience: resourceIndicator,
          scope: RESOURCE_SCOPES.filter((s) => allowed.has(s)).join(' '),
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: args.alg, kid: args.kid } },
        };
      },
    },
  },
  ttl: {
    ClientCredentials: (ctx, token, client) => (client.clientId === 'shortlived' ? 2 : 600),
    AccessToken: 600,
    AuthorizationCode: 60,
    Grant: 600,
    IdToken: 600,
    Interaction: 600,
    RefreshToken: 600,
    Session: 600,
  },
  // Errors go back to the client as JSON; nothing needs logging on the provider side.
  renderError: async (ctx, out) => {
    ctx.type = 'json';
    ctx.body = out;
  },
});

const callback = provider.callback();
const WELL_KNOWN = ['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration'];
server.on('request', (req, res) => {
  if (prefix) {
    // RFC 8414 §3.1 path insertion: /.well-known/X/some/path -> /some/path/.well-known/X
    const [path, query] = req.url.split(/\?(.*)/s);
    for (const wk of WELL_KNOWN) {
      if (path === `${wk}${prefix}`) req.url = `${prefix}${wk}${query !== undefined ? `?${query}` : ''}`;
    }
    if (req.url === prefix || req.url.startsWith(`${prefix}/`) || req.url.startsWith(`${prefix}?`)) {
      // Mounted below the issuer path: oidc-provider derives the mount path from originalUrl.
      req.originalUrl = req.url;
      req.url = req.url.slice(prefix.length) || '/';
    } else {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"error":"not_found"}');
      return;
    }
  }
  callback(req, res);
});

process.on('SIGTERM', () => {
  server.close();
  server.closeAllConnections?.();
  process.exit(0);
});
process.on('SIGINT', () => process.exit(0));
if (args['exit-on-stdin-eof']) {
  process.stdin.on('end', () => process.exit(0));
  process.stdin.resume();
}

process.stdout.write(`${JSON.stringify({
  issuer,
  port,
  jwks_uri: `${issuer}/jwks`,
  token_endpoint: `${issuer}/token`,
})}\n`);
