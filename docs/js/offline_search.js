// Search in a site opened from its files (file://, an offline cluster's shared disk): the
// search plugin's web worker cannot start there, so the same index (search/search_index.js,
// written by tools/mkdocs_hooks.py at build time) is loaded with lunr and searched here.
// Served over HTTP, the plugin's own search runs and this does nothing.
(function () {
  if (window.location.protocol !== "file:") {
    return;
  }
  function load(src, done) {
    var script = document.createElement("script");
    script.src = src;
    script.onload = done;
    document.head.appendChild(script);
  }
  function start() {
    var data = window.mlCommSearchIndex;
    var docs = {};
    var index = lunr(function () {
      this.field("title");
      this.field("text");
      this.ref("location");
      for (var i = 0; i < data.docs.length; i++) {
        docs[data.docs[i].location] = data.docs[i];
        this.add(data.docs[i]);
      }
    });
    var input = document.getElementById("mkdocs-search-query");
    function run() {
      var query = input.value;
      if (query.length < data.config.min_search_length) {
        displayResults([]);
        return;
      }
      var found = [];
      try {
        found = index.search(query);
      } catch (e) {
        found = [];  // a query lunr cannot parse finds nothing
      }
      displayResults(found.map(function (hit) {
        var doc = docs[hit.ref];
        return {location: doc.location, title: doc.title, summary: doc.text.substring(0, 200)};
      }));
    }
    input.addEventListener("keyup", run);
    var term = getSearchTermFromLocation();
    if (term) {
      input.value = term;
      run();
    }
  }
  document.addEventListener("DOMContentLoaded", function () {
    load(joinUrl(base_url, "search/lunr.js"), function () {
      load(joinUrl(base_url, "search/search_index.js"), start);
    });
  });
})();
