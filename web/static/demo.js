// Tally demo client: a small social app whose counts, badges and read
// receipts come from Tally. Plain JS, no framework, no build step.
//
// Tally keeps numbers, not content, so the app's own side (names, post
// texts, which posts and messages exist) comes from /demo/world, and the
// demo tells it about the reposts and messages it makes. Live updates
// arrive over our small graphql-transport-ws client (GraphQLSocket):
// unreadChanged drives the badges, the red dot and a refresh of the
// feed's counts and reactions; readReceiptsChanged drives "N read · M
// unread".
(function () {
  'use strict';

  // ---------------------------------------------------------------- helpers

  var $ = function (id) { return document.getElementById(id); };

  // el builds an element: el('button', {class: 'x', onclick: f}, 'text', child...).
  function el(tag, attrs) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      var v = attrs[k];
      if (v === undefined || v === null || v === false) return;
      if (k.slice(0, 2) === 'on') node.addEventListener(k.slice(2), v);
      else if (k === 'dataset') Object.assign(node.dataset, v);
      else node.setAttribute(k, v === true ? '' : v);
    });
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === undefined || c === null || c === false) continue;
      node.append(c instanceof Node ? c : String(c));
    }
    return node;
  }

  // Ids are decimal strings (snowflakes do not fit a JS number).
  function byIdDesc(a, b) {
    if (a.length !== b.length) return b.length - a.length;
    return a < b ? 1 : a > b ? -1 : 0;
  }

  function compact(n) {
    if (n < 1000) return String(n);
    if (n < 1e6) return (n / 1000).toFixed(n < 1e4 ? 1 : 0).replace(/\.0$/, '') + 'K';
    return (n / 1e6).toFixed(1).replace(/\.0$/, '') + 'M';
  }

  function ago(iso) {
    var s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    if (s < 60) return 'now';
    if (s < 3600) return Math.floor(s / 60) + 'm';
    if (s < 86400) return Math.floor(s / 3600) + 'h';
    if (s < 7 * 86400) return Math.floor(s / 86400) + 'd';
    return new Date(iso).toLocaleDateString(undefined, { month: 'short', day: 'numeric' });
  }

  function clock(iso) {
    return new Date(iso).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
  }

  var toastTimer;
  function toast(msg) {
    var t = $('toast');
    t.textContent = msg;
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(function () { t.hidden = true; }, 4000);
  }

  // ------------------------------------------------------------- the world

  var world = { dev: false, graphqlPath: '/query', users: [], posts: [], groups: [], messages: [] };
  var people = new Map(); // user id -> {name, handle}

  function loadWorld() {
    return fetch('/demo/world', { cache: 'no-store' }).then(function (r) {
      if (!r.ok) throw new Error('the demo world is unavailable (' + r.status + ')');
      return r.json();
    }).then(function (w) {
      world = w;
      world.users = w.users || [];
      world.posts = w.posts || [];
      world.groups = w.groups || [];
      world.messages = w.messages || [];
      (w.users || []).forEach(function (u) { people.set(u.id, u); });
    });
  }

  function person(id) {
    return people.get(id) || { id: id, name: 'User ' + id, handle: 'user' + id };
  }

  var palette = ['#e8505b', '#f6a04d', '#3ca370', '#2f80ed', '#9b51e0', '#14a4b8', '#d6457f', '#6c7a89'];
  function avatar(id, size) {
    var p = person(id);
    var initials = p.name.split(/\s+/).map(function (w) { return w[0]; }).join('').slice(0, 2).toUpperCase();
    var a = el('span', { class: 'avatar ' + (size || ''), title: p.name }, initials);
    a.style.background = palette[Number(id.slice(-3)) % palette.length];
    return a;
  }

  function fillAvatar(node, id) {
    var a = avatar(id);
    node.textContent = a.textContent;
    node.title = a.title;
    node.style.background = a.style.background;
  }

  // mentionsIn turns "@leo and @ana" into the ids of known handles.
  function mentionsIn(text) {
    var ids = [];
    (text.match(/@([\w.-]+)/g) || []).forEach(function (m) {
      people.forEach(function (p) {
        if ('@' + p.handle === m.toLowerCase() && ids.indexOf(p.id) < 0) ids.push(p.id);
      });
    });
    return ids;
  }

  // --------------------------------------------------------------- GraphQL

  var session = { token: '', me: '' };

  function gql(query, variables) {
    return fetch(world.graphqlPath, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + session.token },
      body: JSON.stringify({ query: query, variables: variables || {} }),
    }).then(function (r) { return r.json(); }).then(function (res) {
      if (res.errors && res.errors.length) {
        var e = new Error(res.errors[0].message);
        e.code = res.errors[0].extensions && res.errors[0].extensions.code;
        e.data = res.data;
        throw e;
      }
      return res.data;
    });
  }

  // GraphQLSocket is a small graphql-transport-ws client: connection_init
  // with the bearer token, subscribe / next / error / complete, ping→pong,
  // and reconnect with backoff (re-subscribing everything open).
  function GraphQLSocket(url, token, onState) {
    this.url = url;
    this.token = token;
    this.onState = onState;
    this.subs = new Map();
    this.nextId = 1;
    this.acked = false;
    this.closed = false;
    this.backoff = 500;
    this.connect();
  }

  GraphQLSocket.prototype.connect = function () {
    var self = this;
    var ws = new WebSocket(this.url, 'graphql-transport-ws');
    this.ws = ws;
    this.onState('connecting');
    ws.onopen = function () {
      ws.send(JSON.stringify({ type: 'connection_init', payload: { Authorization: 'Bearer ' + self.token } }));
    };
    ws.onmessage = function (ev) {
      var msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      var sub = self.subs.get(msg.id);
      switch (msg.type) {
        case 'connection_ack':
          self.acked = true;
          self.backoff = 500;
          self.subs.forEach(function (s, id) { self.sendSubscribe(id, s); });
          self.onState('live');
          break;
        case 'ping':
          ws.send(JSON.stringify({ type: 'pong' }));
          break;
        case 'next':
          if (sub) sub.next(msg.payload);
          break;
        case 'error':
          if (sub) { self.subs.delete(msg.id); sub.error(msg.payload); }
          break;
        case 'complete':
          self.subs.delete(msg.id);
          break;
      }
    };
    ws.onclose = function (ev) {
      self.acked = false;
      if (self.closed) return;
      if (ev.code === 4401 || ev.code === 4403) {
        self.closed = true;
        self.onState('unauthorized', ev.reason);
        return;
      }
      self.onState('reconnecting');
      setTimeout(function () { if (!self.closed) self.connect(); }, self.backoff);
      self.backoff = Math.min(self.backoff * 2, 10000);
    };
  };

  GraphQLSocket.prototype.sendSubscribe = function (id, s) {
    this.ws.send(JSON.stringify({ id: id, type: 'subscribe', payload: { query: s.query, variables: s.variables } }));
  };

  // subscribe returns a function that ends the subscription.
  GraphQLSocket.prototype.subscribe = function (query, variables, next, error) {
    var id = String(this.nextId++);
    var s = { query: query, variables: variables, next: next, error: error || function () {} };
    this.subs.set(id, s);
    if (this.acked) this.sendSubscribe(id, s);
    var self = this;
    return function () {
      if (self.subs.delete(id) && self.acked) self.ws.send(JSON.stringify({ id: id, type: 'complete' }));
    };
  };

  GraphQLSocket.prototype.close = function () {
    this.closed = true;
    this.subs.clear();
    if (this.ws) this.ws.close(1000, 'bye');
  };

  // ----------------------------------------------------------------- state

  var VIEWER = 'id redDot unread { mentions comments likes messages system feed total } ' +
    'user { id postCount followerCount followingCount }';
  // reactions lists every kind of the deployment (-reactions), zeros
  // included: the picker is built from it, so it offers what this server
  // has and no more (like alone by default).
  var POST = 'id createdAt author { id } counts { likes comments reposts views favorites } ' +
    'reactions { kind count } viewerReaction viewerHasFavorited';
  var RECEIPTS = 'readCount unreadCount readers { id } unreaders { id }';

  var state = {
    viewer: null,
    view: 'feed',
    socket: null,
    posts: new Map(),      // post id -> Post from Tally
    cards: [],             // feed cards: {id, target} (target = original for reposts)
    group: null,           // the demo group the viewer is in
    messages: new Map(),   // message id -> Message
    markedRead: new Set(), // message ids this page already marked read
    receiptSubs: new Map(),
  };

  // ---------------------------------------------------------------- badges

  var KINDS = ['mentions', 'comments', 'likes', 'messages', 'system', 'feed'];

  function setCount(node, n, cap) {
    node.dataset.count = String(n);
    node.textContent = n > cap ? cap + '+' : String(n);
  }

  function applyViewer(v) {
    var prev = state.viewer;
    state.viewer = v;
    KINDS.forEach(function (k) {
      var n = v.unread[k];
      var b = document.querySelector('[data-testid="badge-' + k + '"]');
      setCount(b.querySelector('.count'), n, 999);
      b.classList.toggle('has', n > 0);
      var pill = document.querySelector('.pill[data-kind="' + k.toUpperCase() + '"]');
      if (pill) { setCount(pill, n, 99); pill.hidden = n === 0; }
    });
    setCount($('badge-total'), v.unread.total, 9999);
    document.title = (v.unread.total ? '(' + compact(v.unread.total) + ') ' : '') + 'Tally demo';
    $('red-dot').hidden = !v.redDot;
    $('red-dot-button').dataset.on = v.redDot ? 'true' : 'false';
    $('stat-posts').textContent = compact(v.user.postCount);
    $('stat-followers').textContent = compact(v.user.followerCount);
    $('stat-following').textContent = compact(v.user.followingCount);
    var banner = $('feed-banner');
    banner.hidden = v.unread.feed === 0;
    banner.textContent = v.unread.feed === 1 ? '1 new post from people you follow' :
      v.unread.feed + ' new posts from people you follow';
    return prev;
  }

  // onUnreadChanged re-reads whatever the change can concern: counts on the
  // feed (someone liked or commented), new messages, new posts.
  function onUnreadChanged(v) {
    var prev = applyViewer(v);
    refreshCounts();
    if (!prev) return;
    if (v.unread.messages !== prev.unread.messages || v.unread.mentions !== prev.unread.mentions) {
      // The sender tells the world (our stand-in for the app's content
      // service) about a message only after Tally acknowledged it, which is
      // also when this event fires: read the world now and once more
      // shortly, so a message registered a moment later still shows.
      loadWorld().then(loadChat).catch(report);
      setTimeout(function () { loadWorld().then(loadChat).catch(report); }, 400);
    }
    if (v.unread.system !== prev.unread.system) loadNotifications();
  }

  function markRead(kind) {
    return gql('mutation($k: UnreadKind!) { markRead(kind: $k) { ' + VIEWER + ' } }', { k: kind })
      .then(function (d) { applyViewer(d.markRead); });
  }

  function onBadge(ev) {
    var kind = ev.currentTarget.dataset.kind;
    markRead(kind).catch(report);
    if (kind === 'MESSAGES') show('chat');
    else if (kind === 'SYSTEM') show('notifications');
    else if (kind === 'FEED') { show('feed'); loadWorld().then(loadFeed).catch(report); }
    else show('feed');
  }

  // ------------------------------------------------------------------ feed

  var FEED_CARDS = 45; // a page: cards plus their originals stay within 100 ids

  function loadFeed() {
    var byId = new Map(world.posts.map(function (p) { return [p.id, p]; }));
    var cards = world.posts.map(function (p) { return { id: p.id, target: p.repostOf || p.id }; })
      .sort(function (a, b) { return byIdDesc(a.id, b.id); }).slice(0, FEED_CARDS);
    var ids = [];
    cards.forEach(function (c) {
      if (ids.indexOf(c.id) < 0) ids.push(c.id);
      if (ids.indexOf(c.target) < 0) ids.push(c.target);
    });
    if (!ids.length) { state.cards = []; renderFeed(byId); return Promise.resolve(); }
    return gql('query Feed($ids: [ID!]!) { posts(ids: $ids) { ' + POST + ' } }', { ids: ids })
      .then(function (d) {
        d.posts.forEach(function (p) { if (p) state.posts.set(p.id, p); });
        state.cards = cards.filter(function (c) { return state.posts.has(c.id) && state.posts.has(c.target); });
        renderFeed(byId);
      });
  }

  // refreshCounts re-reads the counts of every post on screen: one query.
  function refreshCounts() {
    var ids = Array.from(new Set(state.cards.map(function (c) { return c.target; })));
    if (!ids.length || !session.token) return;
    gql('query Counts($ids: [ID!]!) { posts(ids: $ids) { ' + POST + ' } }', { ids: ids })
      .then(function (d) { d.posts.forEach(function (p) { if (p) updatePost(p); }); })
      .catch(report);
  }

  function renderFeed(byId) {
    var list = $('feed');
    list.replaceChildren();
    state.cards.forEach(function (c) { list.append(card(c, byId)); });
    $('feed-empty').hidden = state.cards.length > 0;
    observeViews();
  }

  function card(c, byId) {
    var post = state.posts.get(c.target);
    var repost = c.id !== c.target ? state.posts.get(c.id) : null;
    var author = post.author ? post.author.id : '0';
    var text = (byId.get(c.target) || {}).text || 'A post Tally counts but the demo has no text for.';
    var li = el('li', { class: 'post', 'data-testid': 'post', 'data-post-id': post.id, 'data-card-id': c.id, 'data-author': author });
    if (repost) {
      var who = repost.author && repost.author.id === session.me ? 'You' : person(repost.author ? repost.author.id : '0').name;
      li.append(el('p', { class: 'reposted' }, '↻ ' + who + ' reposted · ' + ago(repost.createdAt)));
    }
    var p = person(author);
    li.append(
      el('div', { class: 'post-head' }, avatar(author),
        el('div', {}, el('strong', {}, p.name), el('span', { class: 'handle' }, ' @' + p.handle + ' · ' + ago(post.createdAt)))),
      el('p', { class: 'post-text' }, text),
      el('div', { class: 'actions' },
        picker(post),
        action('comment', 'Comment', function () { openComment(li, post.id); }),
        action('repost', 'Repost', function () { repostPost(post.id); }),
        action('favorite', 'Save', function () { toggleFavorite(post.id); }),
        el('span', { class: 'views', title: 'Views' }, icon('views'), el('span', { class: 'n', 'data-testid': 'count-views' })))
    );
    paintPost(li, post);
    return li;
  }

  // Icons are inline SVG paths (24×24), so they need no font or file.
  var ICONS = {
    like: 'M12 21s-7.5-4.6-9.6-9.2C.9 8.6 2.9 4.5 6.7 4.5c2.1 0 3.6 1.1 5.3 3 1.7-1.9 3.2-3 5.3-3 3.8 0 5.8 4.1 4.3 7.3C19.5 16.4 12 21 12 21z',
    comment: 'M4 5h16a1 1 0 0 1 1 1v10a1 1 0 0 1-1 1H9l-5 4v-4H4a1 1 0 0 1-1-1V6a1 1 0 0 1 1-1z',
    repost: 'M17 2l4 4-4 4M3 11V9a3 3 0 0 1 3-3h15M7 22l-4-4 4-4M21 13v2a3 3 0 0 1-3 3H3',
    favorite: 'M12 3.5l2.6 5.3 5.9.9-4.3 4.1 1 5.8L12 16.9l-5.2 2.7 1-5.8-4.3-4.1 5.9-.9z',
    views: 'M2 12s3.6-6.5 10-6.5S22 12 22 12s-3.6 6.5-10 6.5S2 12 2 12zm10 3a3 3 0 1 0 0-6 3 3 0 0 0 0 6z',
  };

  function icon(kind) {
    var svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
    svg.setAttribute('viewBox', '0 0 24 24');
    svg.setAttribute('class', 'icon');
    svg.setAttribute('aria-hidden', 'true');
    var path = document.createElementNS('http://www.w3.org/2000/svg', 'path');
    path.setAttribute('d', ICONS[kind]);
    svg.append(path);
    return svg;
  }

  // Reaction kinds the demo has a face for; any other kind of a
  // deployment shows its name. Like keeps its heart icon.
  var FACES = { love: '😍', haha: '😆', wow: '😮', sad: '😢', angry: '😠' };

  function reactionLabel(kind) {
    return kind.charAt(0).toUpperCase() + kind.slice(1);
  }

  // picker is the post's reaction buttons, one per kind of the deployment
  // in its order: the viewer's kind is pressed; pressing another switches
  // to it, pressing it again removes it. With like alone it is the Like
  // button. Like's button keeps the testids of the like-only demo.
  function picker(post) {
    var kinds = post.reactions.map(function (r) { return r.kind; });
    var group = el('div', { class: 'reactions' + (kinds.length > 1 ? ' many' : ''), role: 'group', 'aria-label': 'Reactions', 'data-kinds': kinds.join(',') });
    kinds.forEach(function (kind) {
      var like = kind === 'like';
      var label = reactionLabel(kind);
      group.append(el('button', {
        type: 'button', class: 'act react' + (like ? ' like' : ''), 'data-kind': kind, 'data-testid': like ? 'like' : 'react',
        'aria-label': label, 'aria-pressed': 'false', title: label,
        onclick: function () { react(post.id, kind); },
      }, like ? icon('like') : el('span', { class: 'face', 'aria-hidden': 'true' }, FACES[kind] || kind),
      el('span', { class: 'n', 'data-testid': like ? 'count-likes' : 'reaction-count' })));
    });
    return group;
  }

  function action(kind, label, onclick) {
    return el('button', { type: 'button', class: 'act ' + kind, 'data-testid': kind, 'aria-label': label, title: label, onclick: onclick },
      icon(kind), el('span', { class: 'n', 'data-testid': 'count-' + kindCount(kind) }));
  }

  function kindCount(kind) {
    return { comment: 'comments', repost: 'reposts', favorite: 'favorites' }[kind];
  }

  function paintCount(n, count) {
    if (n.dataset.count === String(count)) return;
    if (n.dataset.count !== undefined) { n.classList.remove('bump'); void n.offsetWidth; n.classList.add('bump'); }
    n.dataset.count = String(count);
    n.textContent = compact(count);
  }

  function paintPost(li, post) {
    var c = post.counts;
    [['comments', c.comments], ['reposts', c.reposts], ['favorites', c.favorites], ['views', c.views]]
      .forEach(function (kv) { paintCount(li.querySelector('[data-testid="count-' + kv[0] + '"]'), kv[1]); });
    // The kinds are the server's: a picker built for other kinds (a
    // restart with another -reactions) is built again.
    var group = li.querySelector('.reactions');
    if (group.dataset.kinds !== post.reactions.map(function (r) { return r.kind; }).join(',')) {
      var fresh = picker(post);
      group.replaceWith(fresh);
      group = fresh;
    }
    post.reactions.forEach(function (r) {
      var b = group.querySelector('.react[data-kind="' + r.kind + '"]');
      var mine = post.viewerReaction === r.kind;
      b.setAttribute('aria-pressed', String(mine));
      b.title = mine ? (r.kind === 'like' ? 'Unlike' : 'Remove your ' + reactionLabel(r.kind)) : reactionLabel(r.kind);
      paintCount(b.querySelector('.n'), r.count);
    });
    li.querySelector('[data-testid="favorite"]').setAttribute('aria-pressed', String(post.viewerHasFavorited));
  }

  function updatePost(post) {
    state.posts.set(post.id, post);
    document.querySelectorAll('.post[data-post-id="' + post.id + '"]').forEach(function (li) { paintPost(li, post); });
  }

  function mutatePost(field, id) {
    return gql('mutation($id: ID!) { ' + field + '(postId: $id) { ' + POST + ' } }', { id: id })
      .then(function (d) { updatePost(d[field]); });
  }

  // react makes kind the viewer's reaction, or removes it when it is
  // already: the post comes back with its reactions, as the like-only
  // demo's likePost did. A refusal (RATE_LIMITED, ...) is a toast, and
  // the picker stays as the server has it.
  function react(id, kind) {
    if (state.posts.get(id).viewerReaction === kind) { mutatePost('unreactToPost', id).catch(report); return; }
    gql('mutation($id: ID!, $kind: String!) { reactToPost(postId: $id, kind: $kind) { ' + POST + ' } }', { id: id, kind: kind })
      .then(function (d) { updatePost(d.reactToPost); })
      .catch(report);
  }

  function toggleFavorite(id) {
    mutatePost(state.posts.get(id).viewerHasFavorited ? 'unfavoritePost' : 'favoritePost', id).catch(report);
  }

  function openComment(li, id) {
    var open = li.querySelector('.comment-box');
    if (open) { open.querySelector('input').focus(); return; }
    var input = el('input', { placeholder: 'Write a comment — @name mentions someone', maxlength: '500', 'data-testid': 'comment-text' });
    var form = el('form', { class: 'comment-box', onsubmit: function (ev) {
      ev.preventDefault();
      var text = input.value.trim();
      if (!text) return;
      gql('mutation($id: ID!, $m: [ID!], $k: String) { commentOnPost(postId: $id, mentions: $m, idempotencyKey: $k) { ' + POST + ' } }',
        { id: id, m: mentionsIn(text), k: 'c-' + Date.now() + '-' + Math.random().toString(36).slice(2) })
        .then(function (d) { updatePost(d.commentOnPost); form.remove(); toast('Comment posted'); })
        .catch(report);
    } }, input, el('button', { type: 'submit', class: 'primary small' }, 'Reply'));
    li.append(form);
    input.focus();
  }

  function repostPost(id) {
    gql('mutation($id: ID!) { repostPost(postId: $id) { id } }', { id: id })
      .then(function (d) {
        // The world takes registrations in dev mode only (see web.Handler).
        if (!world.dev) return;
        return fetch('/demo/world/posts', {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ id: d.repostPost.id, repostOf: id }),
        });
      })
      .then(loadWorld).then(loadFeed).then(function () { toast('Reposted to your followers'); })
      .catch(report);
  }

  // Views: a card counts as seen once half of it was on screen; seen ids
  // go to recordViews in batches, as a client reports impressions.
  var seen = new Set();
  var pendingViews = [];
  var viewTimer;
  var viewObserver = 'IntersectionObserver' in window ? new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      var id = e.target.dataset.postId;
      if (e.isIntersecting && !seen.has(id)) { seen.add(id); pendingViews.push(id); }
    });
    clearTimeout(viewTimer);
    viewTimer = setTimeout(flushViews, 1000);
  }, { threshold: 0.5 }) : null;

  function observeViews() {
    if (!viewObserver) return;
    viewObserver.disconnect();
    document.querySelectorAll('.post').forEach(function (li) { viewObserver.observe(li); });
  }

  function flushViews() {
    if (!pendingViews.length || !session.token) return;
    var ids = pendingViews.splice(0, 100);
    gql('mutation($ids: [ID!]!) { recordViews(postIds: $ids) }', { ids: ids }).catch(report);
  }

  // ------------------------------------------------------------------ chat

  function loadChat() {
    var g = world.groups.filter(function (g) { return g.members.indexOf(session.me) >= 0; })[0];
    if (!g) { renderChatEmpty(); return Promise.resolve(); }
    var ids = world.messages.filter(function (m) { return m.group === g.id; })
      .map(function (m) { return m.id; }).slice(-60);
    var fields = 'id text sentAt sender { id }';
    var q = 'query Chat($g: ID!' + ids.map(function (_, i) { return ', $m' + i + ': ID!'; }).join('') + ') {' +
      ' group(id: $g) { id memberCount members { id } }' +
      ids.map(function (_, i) { return ' m' + i + ': message(id: $m' + i + ') { ' + fields + ' }'; }).join('') + ' }';
    var vars = { g: g.id };
    ids.forEach(function (id, i) { vars['m' + i] = id; });
    return gql(q, vars).then(function (d) {
      state.group = { id: g.id, name: g.name, members: d.group.members.map(function (m) { return m.id; }) };
      ids.forEach(function (_, i) { if (d['m' + i]) state.messages.set(d['m' + i].id, d['m' + i]); });
      renderChat();
      markViewedRead();
    }).catch(function (e) {
      if (e.code === 'FORBIDDEN' || e.code === 'NOT_FOUND') { renderChatEmpty(); return; }
      throw e;
    });
  }

  function renderChatEmpty() {
    state.group = null;
    $('chat-empty').hidden = false;
    $('composer').hidden = true;
    $('messages').replaceChildren();
    $('chat-title').textContent = 'Group chat';
    $('chat-members').textContent = '';
    $('chat-faces').replaceChildren();
  }

  function renderChat() {
    var g = state.group;
    $('chat-empty').hidden = true;
    $('composer').hidden = false;
    $('chat-title').textContent = g.name || 'Group chat';
    $('chat-members').textContent = g.members.length + ' members · ' +
      g.members.map(function (id) { return id === session.me ? 'you' : person(id).name.split(' ')[0]; }).join(', ');
    $('chat-faces').replaceChildren.apply($('chat-faces'), g.members.map(function (id) { return avatar(id, 'small'); }));
    var list = $('messages');
    var ids = Array.from(state.messages.keys()).sort(function (a, b) { return byIdDesc(b, a); });
    var atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
    list.replaceChildren();
    ids.forEach(function (id) { list.append(bubble(state.messages.get(id))); });
    if (atBottom || !list.dataset.scrolled) { list.scrollTop = list.scrollHeight; list.dataset.scrolled = '1'; }
    ids.forEach(function (id) { if (state.messages.get(id).sender.id === session.me) watchReceipts(id); });
  }

  function bubble(m) {
    var mine = m.sender.id === session.me;
    var li = el('li', { class: 'msg' + (mine ? ' mine' : ''), 'data-testid': 'message', 'data-message-id': m.id },
      mine ? null : avatar(m.sender.id, 'small'),
      el('div', { class: 'bubble' },
        mine ? null : el('span', { class: 'from' }, person(m.sender.id).name),
        el('span', { class: 'text' }, m.text),
        el('span', { class: 'meta' }, clock(m.sentAt))));
    if (mine) {
      var r = el('button', { type: 'button', class: 'receipt', 'data-testid': 'receipt', onclick: function (ev) { showReaders(ev, m.id); } }, '…');
      li.querySelector('.bubble').append(r);
      var known = state.receiptSubs.get(m.id);
      if (known && known.receipts) paintReceipt(r, known.receipts);
    }
    return li;
  }

  // The server caps subscriptions per socket (-ws-max-subscriptions, 100 by
  // default); the demo keeps its own under that, beside unreadChanged, by
  // letting the oldest message's receipts go still.
  var MAX_RECEIPT_WATCHES = 50;

  // watchReceipts reads a message's receipts and subscribes to changes.
  function watchReceipts(id) {
    if (state.receiptSubs.has(id)) return;
    var entry = { receipts: null, stop: null };
    state.receiptSubs.set(id, entry);
    var live = 0;
    state.receiptSubs.forEach(function (e) { if (e.stop) live++; });
    state.receiptSubs.forEach(function (old) {
      if (live >= MAX_RECEIPT_WATCHES && old.stop) {
        old.stop();
        old.stop = null;
        live--;
      }
    });
    var apply = function (r) {
      entry.receipts = r;
      var b = document.querySelector('.msg[data-message-id="' + id + '"] .receipt');
      if (b) paintReceipt(b, r);
    };
    entry.stop = state.socket.subscribe('subscription($id: ID!) { readReceiptsChanged(messageId: $id) { ' + RECEIPTS + ' } }',
      { id: id }, function (p) { if (p.data) apply(p.data.readReceiptsChanged); });
    gql('query($id: ID!) { message(id: $id) { readReceipts { ' + RECEIPTS + ' } } }', { id: id })
      .then(function (d) { if (!entry.receipts) apply(d.message.readReceipts); })
      .catch(report);
  }

  function paintReceipt(b, r) {
    b.dataset.read = String(r.readCount);
    b.dataset.unread = String(r.unreadCount);
    b.textContent = r.readCount + ' read · ' + r.unreadCount + ' unread';
    b.classList.toggle('all', r.unreadCount === 0 && r.readCount > 0);
  }

  function showReaders(ev, id) {
    ev.stopPropagation();
    var r = (state.receiptSubs.get(id) || {}).receipts;
    if (!r) return;
    var names = function (testid, list) {
      var ul = el('ul', { 'data-testid': testid });
      list.forEach(function (u) { ul.append(el('li', {}, avatar(u.id, 'tiny'), el('span', { class: 'name' }, person(u.id).name))); });
      if (!list.length) ul.append(el('li', { class: 'hint' }, 'Nobody'));
      return ul;
    };
    var pop = $('popover');
    pop.replaceChildren(el('h4', {}, 'Read by ' + r.readCount), names('readers', r.readers),
      el('h4', {}, 'Not yet read by ' + r.unreadCount), names('unreaders', r.unreaders));
    pop.hidden = false;
    // Below the receipt, or above it when the window has no room below.
    var box = ev.currentTarget.getBoundingClientRect();
    var top = box.bottom + 6;
    if (top + pop.offsetHeight > window.innerHeight - 8) top = Math.max(8, box.top - 6 - pop.offsetHeight);
    pop.style.top = (window.scrollY + top) + 'px';
    pop.style.left = Math.max(8, box.right - pop.offsetWidth) + 'px';
  }

  // markViewedRead: while the chat is on screen, others' messages are read.
  function markViewedRead() {
    if (state.view !== 'chat' || document.visibilityState === 'hidden' || !state.group) return;
    var ids = [];
    state.messages.forEach(function (m, id) {
      if (m.sender.id !== session.me && !state.markedRead.has(id)) ids.push(id);
    });
    if (!ids.length) return;
    ids = ids.slice(-100);
    ids.forEach(function (id) { state.markedRead.add(id); });
    gql('mutation($ids: [ID!]!) { markMessagesRead(messageIds: $ids) { id } }', { ids: ids })
      .then(function () { if (state.viewer && state.viewer.unread.messages > 0) return markRead('MESSAGES'); })
      .catch(function (e) { ids.forEach(function (id) { state.markedRead.delete(id); }); report(e); });
  }

  function sendMessage(ev) {
    ev.preventDefault();
    var input = $('composer-text');
    var text = input.value.trim();
    if (!text || !state.group) return;
    input.value = '';
    gql('mutation($g: ID!, $t: String!, $m: [ID!], $k: String) { sendMessage(groupId: $g, text: $t, mentions: $m, idempotencyKey: $k) { id text sentAt sender { id } } }',
      { g: state.group.id, t: text, m: mentionsIn(text), k: 'm-' + Date.now() + '-' + Math.random().toString(36).slice(2) })
      .then(function (d) {
        var m = d.sendMessage;
        state.messages.set(m.id, m);
        renderChat();
        $('messages').scrollTop = $('messages').scrollHeight;
        if (!world.dev) return;
        return fetch('/demo/world/messages', {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ id: m.id, group: state.group.id }),
        });
      })
      .catch(function (e) { input.value = text; report(e); });
  }

  // --------------------------------------------------------- notifications

  function loadNotifications() {
    return gql('{ systemNotifications(first: 20) { id title body createdAt } }').then(function (d) {
      var list = $('notes');
      list.replaceChildren.apply(list, d.systemNotifications.map(function (n) {
        return el('li', { class: 'note', 'data-testid': 'notification' },
          el('span', { class: 'note-icon', 'aria-hidden': 'true' }, 'i'),
          el('div', {}, el('strong', {}, n.title), el('p', {}, n.body), el('span', { class: 'handle' }, ago(n.createdAt))));
      }));
      $('notes-empty').hidden = d.systemNotifications.length > 0;
    }).catch(report);
  }

  // --------------------------------------------------------------- screens

  function show(view) {
    state.view = view;
    document.querySelectorAll('.tab').forEach(function (t) { t.classList.toggle('active', t.dataset.view === view); });
    ['feed', 'chat', 'notifications'].forEach(function (v) { $('view-' + v).hidden = v !== view; });
    if (view === 'chat') {
      var list = $('messages');
      list.scrollTop = list.scrollHeight;
      markViewedRead();
    }
  }

  function report(e) {
    if (e && (e.code === 'UNAUTHENTICATED')) { signOut(refusal(e.message)); return; }
    toast((e && e.message) || 'Something went wrong');
  }

  // refusal says why the server refused the token (its words), and what
  // to do.
  function refusal(why) {
    why = (why || '').replace(/^Forbidden:\s*/, '');
    return 'The server refused this token' + (why ? ': ' + why : '') + '. Sign in again.';
  }

  function setLive(s, why) {
    var live = $('live');
    live.dataset.state = s;
    live.textContent = { live: 'live', connecting: 'connecting', reconnecting: 'reconnecting', unauthorized: 'signed out' }[s] || s;
    if (s === 'live' && state.viewer) { // catch up on what a dropped socket missed
      gql('{ viewer { ' + VIEWER + ' } }').then(function (d) { onUnreadChanged(d.viewer); }).catch(report);
    }
    if (s === 'unauthorized') {
      // A close frame's reason is cut at 123 bytes: ask over HTTP, whose
      // refusal says it whole.
      gql('{ __typename }').then(function () { signOut(refusal(why)); }, function (e) {
        signOut(e && e.code === 'UNAUTHENTICATED' ? refusal(e.message) : refusal(why));
      });
    }
  }

  function start(token) {
    session.token = token;
    return gql('{ viewer { ' + VIEWER + ' } }').then(function (d) {
      session.me = d.viewer.id;
      sessionStorage.setItem('tally-demo-token', token);
      var me = person(session.me);
      $('signin').hidden = true;
      $('app').hidden = false;
      $('tabs').hidden = false;
      $('account').hidden = false;
      $('me-name').textContent = me.name;
      fillAvatar($('me-avatar'), session.me);
      fillAvatar($('profile-avatar'), session.me);
      $('profile-name').textContent = me.name;
      $('profile-handle').textContent = '@' + me.handle;
      applyViewer(d.viewer);
      var url = new URL(world.graphqlPath, location.href);
      url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
      state.socket = new GraphQLSocket(url.href, token, setLive);
      state.socket.subscribe('subscription { unreadChanged { ' + VIEWER + ' } }', {},
        function (p) { if (p.data) onUnreadChanged(p.data.unreadChanged); },
        function (errs) { toast('Live badges stopped: ' + ((errs && errs[0] && errs[0].message) || 'error')); });
      show(state.view);
      return Promise.all([loadFeed(), loadChat(), loadNotifications()]);
    });
  }

  // signOut returns to the sign-in screen, saying why when message is
  // set. The page is loaded anew (a new URL fragment alone would not
  // reload it, and the old feed would stay up under a dead token), so no
  // state of the old session survives; the fragment carries the message.
  function signOut(message) {
    if (state.socket) state.socket.close();
    sessionStorage.removeItem('tally-demo-token');
    history.replaceState(null, '', '/demo' + (message ? '#' + encodeURIComponent(message) : ''));
    location.reload();
  }

  function showSignIn(message) {
    $('signin').hidden = false;
    $('app').hidden = true;
    var hint = message || decodeURIComponent(location.hash.slice(1));
    if (hint) { $('signin-hint').textContent = hint; $('signin-hint').hidden = false; }
    if (!world.seeded) explainUnseeded();
    if (world.dev) {
      var cast = $('cast');
      cast.replaceChildren.apply(cast, world.users.map(function (u) {
        return el('button', { type: 'button', class: 'who', 'data-testid': 'sign-in-as', 'data-user': u.id, onclick: function () { signInAs(u.id); } },
          avatar(u.id, 'large'), el('strong', {}, u.name), el('span', { class: 'handle' }, '@' + u.handle));
      }));
      if (!world.users.length) { cast.append(el('p', { class: 'hint' }, 'Without a world you can still be user 1:'), el('button', { type: 'button', class: 'primary', onclick: function () { signInAs('1'); } }, 'Sign in as user 1')); }
    } else {
      document.querySelector('.signin .lead').textContent = 'Sign in as a user of this server, then open a second window as someone else and watch the badges move.';
      $('paste-form').hidden = false;
    }
  }

  // Before `tally demo-seed` there is nobody to be: say what the demo is
  // and how to make its world, with this server's data directory.
  function explainUnseeded() {
    $('unseeded').hidden = false;
    var cmd = world.seedCommand || 'tally demo-seed -data DIR';
    var args = cmd.replace(/^tally demo-seed/, '');
    $('seed-command').textContent = 'go run . demo-seed' + args;
    $('seed-command-binary').textContent = cmd;
    $('serve-command').textContent = 'go run .' + args;
    $('unseeded-dev').hidden = !world.dev;
    if (!world.dev) {
      $('seed-command').textContent = cmd;
      $('seed-binary-hint').hidden = true;
      $('serve-command').textContent = 'tally' + args;
    }
  }

  function signInAs(user) {
    fetch('/demo/token?user=' + encodeURIComponent(user), { cache: 'no-store' })
      .then(function (r) { if (!r.ok) throw new Error('could not get a token for user ' + user); return r.json(); })
      .then(function (d) { return start(d.token); })
      .catch(report);
  }

  function init() {
    document.querySelectorAll('.badge').forEach(function (b) { b.addEventListener('click', onBadge); });
    document.querySelectorAll('.tab').forEach(function (t) {
      t.addEventListener('click', function () { show(t.dataset.view); });
    });
    $('feed-banner').addEventListener('click', function () {
      markRead('FEED').then(loadWorld).then(loadFeed).catch(report);
    });
    $('red-dot-button').addEventListener('click', function () {
      gql('mutation { clickRedDot { ' + VIEWER + ' } }').then(function (d) {
        applyViewer(d.clickRedDot);
      }).catch(report);
    });
    $('switch-user').addEventListener('click', function () { signOut(''); });
    $('composer').addEventListener('submit', sendMessage);
    $('paste-form').addEventListener('submit', function (ev) {
      ev.preventDefault();
      start($('paste-token').value.trim().replace(/^Bearer\s+/i, '')).catch(report);
    });
    document.addEventListener('click', function (ev) {
      if (!$('popover').contains(ev.target)) $('popover').hidden = true;
    });
    document.addEventListener('visibilitychange', function () {
      if (document.visibilityState === 'visible') { markViewedRead(); refreshCounts(); }
    });
    // Counts move for reasons no badge reports (someone else's post got a
    // like, a reaction switched kind, which bumps nobody): re-read the
    // page's counts and reactions every few seconds while in view.
    setInterval(function () { if (document.visibilityState === 'visible') refreshCounts(); }, 15000);

    loadWorld().then(function () {
      var params = new URLSearchParams(location.search);
      var stored = sessionStorage.getItem('tally-demo-token');
      if (params.get('user') && world.dev) return signInAs(params.get('user'));
      if (stored) {
        return start(stored).catch(function (e) {
          sessionStorage.removeItem('tally-demo-token');
          showSignIn(e && e.code === 'UNAUTHENTICATED' ? refusal(e.message) : '');
        });
      }
      showSignIn();
    }).catch(function (e) { toast(e.message); });
  }

  init();
})();
