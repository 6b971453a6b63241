// Starts GraphiQL against Tally. The page hands us its settings in the
// #tally-config JSON block: the GraphQL path, the prefilled headers and
// the first query. Subscriptions go over graphql-transport-ws on the same
// path; GraphiQL sends the Headers tab as the connection_init payload, so
// {"Authorization": "Bearer ..."} signs the socket in too.
(function () {
  'use strict';
  var missing = [];
  if (typeof React === 'undefined') missing.push('React');
  if (typeof ReactDOM === 'undefined') missing.push('ReactDOM');
  if (typeof GraphiQL === 'undefined') missing.push('GraphiQL');
  if (missing.length || window.tallyAssetFailures().length) {
    window.tallyGraphiQLFailed(missing);
    return;
  }
  try {
    var cfg = JSON.parse(document.getElementById('tally-config').textContent);
    var url = new URL(cfg.graphqlPath, window.location.href);
    var wsUrl = new URL(url.href);
    wsUrl.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';

    var fetcher = GraphiQL.createFetcher({ url: url.href, subscriptionUrl: wsUrl.href });
    var h = React.createElement;
    var logo = h(GraphiQL.Logo, null,
      h('span', { className: 'tally-logo' },
        h('img', { src: '/assets/favicon.svg', alt: '', width: 22, height: 22 }), 'Tally',
        h('a', { href: '/demo', className: 'tally-demo-link', 'data-testid': 'demo-link' }, 'Open the demo →')));
    var root = ReactDOM.createRoot(document.getElementById('graphiql'));
    root.render(h(GraphiQL, {
      fetcher: fetcher,
      defaultQuery: cfg.query,
      defaultHeaders: cfg.headers,
      defaultEditorToolsVisibility: 'headers',
      shouldPersistHeaders: false,
    }, logo));
    window.tallyGraphiQLStarted = true;
  } catch (e) {
    window.tallyGraphiQLFailed([], e && e.message ? e.message : String(e));
  }
})();
