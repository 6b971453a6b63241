// Loaded in the head, before GraphiQL's stylesheet and scripts, so that a
// page whose files do not arrive (no internet with -graphiql-cdn, a blocked
// CDN, a broken build) says so instead of showing "Loading GraphiQL…"
// forever. The tags report failures here (onerror); graphiql.js reports
// what failed or is missing when it runs; a timer covers a CDN that never
// answers.
(function () {
  'use strict';
  var failed = [];
  var shown = false;

  function show(detail) {
    if (shown || window.tallyGraphiQLStarted) return;
    shown = true;
    var cfg = JSON.parse(document.getElementById('tally-config').textContent);
    var root = document.getElementById('graphiql');
    var box = document.createElement('div');
    box.className = 'load-failed';
    box.setAttribute('data-testid', 'graphiql-load-failed');
    box.setAttribute('role', 'alert');
    var h = document.createElement('h1');
    h.textContent = 'GraphiQL could not start';
    var p = document.createElement('p');
    p.textContent = detail;
    var fix = document.createElement('p');
    fix.textContent = cfg.cdn
      ? 'This server loads GraphiQL from a CDN (-graphiql-cdn), which this browser cannot reach. ' +
        'Restart tally without -graphiql-cdn (and without TALLY_GRAPHIQL_CDN) to use the copy built into the binary.'
      : 'The copy built into tally did not load. Reload the page; if it persists, rebuild tally from a checkout ' +
        'that has web/vendor (scripts/web-assets restores it).';
    var alt = document.createElement('p');
    alt.innerHTML = 'The API itself still answers at <code></code>; the demo is at <a href="/demo">/demo</a>.';
    alt.querySelector('code').textContent = cfg.graphqlPath;
    box.append(h, p, fix, alt);
    root.replaceChildren(box);
  }

  var listed = null; // the message's list of failed files, once shown
  window.tallyAssetFailed = function (src) {
    failed.push(src);
    // A stylesheet's error event can come after the scripts gave up.
    if (listed) listed.textContent = 'These files did not load: ' + failed.join(', ') + '.';
  };
  // Called by graphiql.js: name what did not load, or the error that
  // stopped GraphiQL from rendering.
  window.tallyGraphiQLFailed = function (missing, err) {
    var what = failed.length ? failed : missing;
    show(err
      ? 'GraphiQL failed while starting: ' + err
      : 'These files did not load: ' + what.join(', ') + '.');
    if (!err && failed.length) listed = document.querySelector('[data-testid="graphiql-load-failed"] p');
  };
  // What failed to load so far (graphiql.js stops on any).
  window.tallyAssetFailures = function () { return failed.slice(); };
  setTimeout(function () {
    if (!window.tallyGraphiQLStarted) {
      show('GraphiQL\'s scripts have not arrived after 20 seconds' + (failed.length ? ' (failed: ' + failed.join(', ') + ')' : '') + '.');
    }
  }, 20000);
})();
