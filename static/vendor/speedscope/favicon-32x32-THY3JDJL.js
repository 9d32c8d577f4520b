(()=>{var T="./favicon-32x32-3EB2YCUY.png";})();
//# sourceMappingURL=favicon-32x32-THY3JDJL.js.map
