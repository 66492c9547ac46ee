// zongji (@vlasky/zongji) peer for benches/e2e.sh.
//
// Streams the binlog from START to HEAD as a replica and touches every value
// of every row image, then prints one JSON line with the counts and exits.
// Arguments: HOST PORT USER PASSWORD SERVER_ID START_FILE START_POS HEAD_FILE HEAD_POS.
// ZONGJI_MODULE is the path of the installed package's index.js.
import { pathToFileURL } from 'node:url';

const { default: ZongJi } = await import(pathToFileURL(process.env.ZONGJI_MODULE).href);
const [host, port, user, password, serverId, startFile, startPos, headFile, headPos] =
  process.argv.slice(2);

const key = (file, pos) => [Number(file.slice(file.lastIndexOf('.') + 1)), Number(pos)];
const head = key(headFile, headPos);
const reached = (file, pos) => {
  const k = key(file, pos);
  return k[0] > head[0] || (k[0] === head[0] && k[1] >= head[1]);
};

const zongji = new ZongJi({ host, port: Number(port), user, password });
let rows = 0;
let values = 0;
let stopping = false;

const touch = (image) => {
  for (const v of Object.values(image)) {
    if (v !== undefined) values += 1;
  }
};

zongji.on('binlog', (evt) => {
  switch (evt.getTypeName()) {
    case 'WriteRows':
    case 'DeleteRows':
      for (const row of evt.rows) {
        rows += 1;
        touch(row);
      }
      break;
    case 'UpdateRows':
      for (const row of evt.rows) {
        rows += 1;
        touch(row.before);
        touch(row.after);
      }
      break;
    default:
      break;
  }
  if (!stopping && reached(zongji.options.filename, zongji.options.position)) {
    stopping = true;
    console.log(JSON.stringify({ rows, values, end: `${zongji.options.filename}:${zongji.options.position}` }));
    zongji.stop();
  }
});
zongji.on('error', (err) => {
  console.error('zongji error:', err);
  process.exit(1);
});
zongji.on('stopped', () => process.exit(0));

zongji.start({
  serverId: Number(serverId),
  filename: startFile,
  position: Number(startPos),
  includeEvents: ['tablemap', 'writerows', 'updaterows', 'deleterows', 'xid', 'rotate'],
});
