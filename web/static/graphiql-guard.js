// Loaded before GraphiQL's own scripts so that a page whose scripts do not
// arrive (no internet with -graphiql-cdn, a blocked CDN, a broken build)
// says so instead of showing "Loading GraphiQL…" forever. The script tags
// report failures here (onerror); graphiql.js reports what is still
// missing when it runs; a timer covers a CDN that never answers.
(function () {
  'use strict';
  var cfg = JSON.parse(document.getElementById('tally-config').textContent);
  var failed = [];
  var shown = false;

  function show(detail) {
    if (shown || window.tallyGraphiQLStarted) return;
    shown = true;
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

  window.tallyAssetFailed = function (src) {
    failed.push(src);
  };
  // Called by graphiql.js: name what did not load, or the error that
  // stopped GraphiQL from rendering.
  window.tallyGraphiQLFailed = function (missing, err) {
    var what = failed.length ? failed : missing;
    show(err
      ? 'GraphiQL failed while starting: ' + err
      : 'These scripts did not load: ' + what.join(', ') + '.');
  };
  setTimeout(function () {
    if (!window.tallyGraphiQLStarted) {
      show('GraphiQL\'s scripts have not arrived after 20 seconds' + (failed.length ? ' (failed: ' + failed.join(', ') + ')' : '') + '.');
    }
  }, 20000);
})();
