// A real OpenID provider for the service-mode tests: panva's certified `oidc-provider` (npm),
// configured like a team's Keycloak or CILogon: JWT access tokens bound to the resource the
// client names (RFC 8707), PKCE, dynamic client registration, and the client-credentials grant
// so tests can mint tokens without a browser. Started by tests/integration/oidc_support.py:
//   node oidc_provider.mjs PORT   (env OIDC_PROVIDER_LIB: the installed package's lib/index.js)
// Prints "ready ISSUER" on stdout once it listens.
import { generateKeyPairSync } from 'node:crypto';
import { pathToFileURL } from 'node:url';

const { default: Provider } = await import(pathToFileURL(process.env.OIDC_PROVIDER_LIB).href);
const port = Number(process.argv[2]);
const issuer = `http://127.0.0.1:${port}`;
const FEDHPC = 'fedhpc:read fedhpc:submit fedhpc:data fedhpc:admin';

const key = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });
key.kid = 'k1';
key.use = 'sig';
key.alg = 'RS256';

// Machine clients stand for people: the test mints each person's token with client credentials.
const people = {
  alice: { email: 'alice@lab.example', ttl: 600 },
  bob: { email: 'bob@lab.example', ttl: 2 }, // short-lived: the expiry test waits it out
  mallory: { email: 'mallory@elsewhere.example', ttl: 600 },
  carol: { email: 'carol@lab.example', ttl: 600 }, // a second person (test_service_owners)
  dana: { email: 'dana@lab.example', ttl: 600 }, // the operator, with fedhpc:admin
  erin: { email: 'erin@lab.example', ttl: 600 }, // two more people: the long-poll test
  frank: { email: 'frank@lab.example', ttl: 600 },
};
const clients = Object.keys(people).map((id) => ({
  client_id: id,
  client_secret: `${id}-secret-for-tests-only`,
  grant_types: ['client_credentials'],
  redirect_uris: [],
  response_types: [],
  token_endpoint_auth_method: 'client_secret_post',
  scope: FEDHPC,
}));

// fedhpc's authorization server facade signs people in here through one static confidential
// client the operator registered (test_service_facade), as at Globus Auth: env FACADE_REDIRECT_URI.
if (process.env.FACADE_REDIRECT_URI) {
  clients.push({
    client_id: 'fedhpc-facade',
    client_secret: 'fedhpc-facade-secret-for-tests-only',
    grant_types: ['authorization_code', 'refresh_token'],
    redirect_uris: [process.env.FACADE_REDIRECT_URI],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
    scope: 'openid email offline_access',
  });
}

const provider = new Provider(issuer, {
  clients,
  jwks: { keys: [key] },
  cookies: { keys: ['fedhpc-test-cookie-key'] },
  scopes: ['openid', 'email', 'offline_access', ...FEDHPC.split(' ')],
  claims: { openid: ['sub'], email: ['email', 'email_verified'] },
  pkce: { required: () => true },
  findAccount: async (_ctx, id) => ({
    accountId: id,
    claims: async () => ({ sub: id, email: id, email_verified: true }),
  }),
  extraTokenClaims: async (_ctx, token) => {
    if (token.kind === 'ClientCredentials') {
      const person = people[token.clientId];
      return person ? { email: person.email, email_verified: true } : {};
    }
    return token.accountId?.includes('@') ? { email: token.accountId, email_verified: true } : {};
  },
  features: {
    devInteractions: { enabled: true },
    clientCredentials: { enabled: true },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (_ctx, _client, oneOf) => oneOf ?? undefined,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource, client) => ({
        scope: FEDHPC,
        audience: resource,
        accessTokenTTL: people[client.clientId]?.ttl ?? 600,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'RS256' } },
      }),
    },
  },
});
provider.proxy = false;
provider.listen(port, '127.0.0.1', () => console.log(`ready ${issuer}`));
